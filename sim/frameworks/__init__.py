"""The training frameworks a plan is run with: a step's configuration written as their job
(torchtitan, Megatron-LM, NeMo / Megatron-Bridge) and their jobs read back as a step
(sim.frameworks.job; docs/cli.md, "From a plan to a job")."""
