"""Long-context inference with context parallelism: prefill over a cached prefix (pass-KV,
pass-Q and all-gather rings), decode over a sharded K/V cache, a whole request's time to
first token and time per output token, and a planner of the splits (docs/inference.md;
docs/design.md, "Inference").

The API, module by module (nothing is re-exported here; import from the module):

``sim.inference.work`` (who holds which tokens; closed forms)
    ``cache_tokens(P, n, cache_layout) -> list[np.ndarray]``: the cached positions
    0..P-1 each rank holds (``cache_layout`` in ``CACHE_LAYOUTS``: contiguous, zigzag,
    striped); ``cached_counts`` their counts. ``padded_new(T, n, layout)``: T rounded up
    to the layout's chunks. ``new_tokens(P, T, n, layout) -> (n, T/n)``: the global
    positions P.. of each rank's new tokens (``sim.layouts.rank_tokens`` over T, plus P).
    ``block_pairs(P, T, n, layout, cache_layout) -> (n, n)``: unmasked (query, key) pairs
    of rank r's new queries against the cached and new K/V of rank s, per head and batch
    item (a new query sees every cached key and the new keys at or before it);
    ``rank_pairs(..., scheme)``: each rank's work under a scheme. ``q_hop_bytes``,
    ``kv_hop_bytes``, ``partial_bytes``: bytes of a pass-Q hop, a pass-KV hop, a partial
    (output + fp32 log-sum-exp) returned by pass-Q's all-to-all. ``rule_scheme(P, T,
    heads, kv_heads)`` and ``rule_threshold``: arXiv 2411.01783's rule (pass-KV when
    T / (T + P) >= 2 H_kv / H). ``SCHEMES = ("pass-kv", "pass-q", "allgather")``.

``sim.inference.prefill`` (one attention layer of a prefill, on the engine)
    ``PrefillAttention(n_ranks, cached, new, heads, kv_heads, head_dim=128, batch=1,
    dtype="bf16", kv_dtype="bf16", layout="zigzag", cache_layout="zigzag",
    scheme="pass-kv")``: frozen, validated; heads and kv_heads are those of one GPU.
    ``simulate_prefill_attention(shape, hardware) -> sim.trace.format.Trace``: the
    standard simulated trace (config ``kind: prefill`` plus the shape; ring hops are kind
    ``kv`` whatever they carry, meta ``carries`` says ``q`` or ``kv``; pass-Q's return is
    ``a2a`` at step N followed by one merge compute per rank; allgather's gather ``ag``).
    ``build_prefill_schedule``, ``merge_s`` (pass-Q's merge kernel time).

``sim.inference.decode`` (one attention layer of a decode step)
    ``DecodeAttention(n_ranks, prompts, generated=0, heads, kv_heads, head_dim=128,
    dtype="bf16", kv_dtype="bf16", layout="round-robin"|"contiguous",
    merge="all-gather"|"all-to-all")``; ``.tokens() -> (requests, n)`` cached tokens per
    rank; ``.kv_bytes()``; ``attention_s(shape, stream_gbps)`` (memory-bound time per
    rank); ``merge_kernel_s``; ``simulate_decode_attention(shape, hardware) -> Trace``
    (config ``kind: decode``).

``sim.inference.serve`` (the whole model on TP x CP GPUs)
    ``Serving(model, hardware, tp, cp, dtype="bf16"|"fp8", kv_dtype)``;
    ``prefill(serving, cached, new, batch=1, scheme=None, layout, cache_layout) ->
    Prefill`` (``.prefill_s``, ``.parts``, ``.scheme_attention_s``, ``.rule_scheme``,
    ``.chosen_scheme``, ``.trace``, ``.to_dict()``); ``decode(serving, prompts, output,
    layout, merge) -> Decode`` (``.tpot_s``, ``.parts``, ``.kv_cache_bytes_per_gpu``,
    ``.max_context_tokens``, ``.trace``, ``.to_dict()``); ``max_context_tokens``,
    ``check_fits``; ``simulate_config(trace.config, hardware) -> Trace``: the layer a trace's
    header describes (``kind`` prefill or decode: ``PrefillAttention.from_config``,
    ``DecodeAttention.from_config``), replayed, for comparing a measured run with the model.

``sim.inference.request``: a whole request (TTFT and TPOT); ``sim.inference.plan``: the
splits ranked for a latency target.

The exact kernels of hw/ shard the tokens the same way: the new tokens by
``work.new_tokens`` and the cache by ``work.cache_tokens``, so their traces line up with
``simulate_prefill_attention`` and ``simulate_decode_attention`` step by step.
"""
