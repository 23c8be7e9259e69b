"""What is simulated: the workload and the scenario (sim.scenario.config), the options that
describe them (schema), the model presets, packed documents, and the counts every part
shares (quantities, memory; docs/design.md, Definitions).
"""
