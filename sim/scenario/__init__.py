"""What is simulated: the workload and the scenario (sim.scenario.config), the options that
describe them (option: the record; schema: every option, the schemes' own included) and
the one way option values become a scenario (resolve), the model presets, packed
documents, and the counts every part shares (quantities, memory; docs/design.md,
Definitions).
"""
