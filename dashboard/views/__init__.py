"""The page's views, one module each with its components (`view()`) and its callbacks
(`register_callbacks`): the controls on the left (scenario.py), the cards, downloads and
layout strip over the tabs (summary.py), a module per tab named by its value
(dashboard/contents.TABS: questions, timeline, blocks, compare, schemes, sweep, memory,
merge, measured, traces, plan, inference) and the language switch (language.py).

dashboard.app.create_app calls each `register_callbacks` with the app it made: callbacks
attach to that app, never at import. The views share a few components and rules
(common.py), the texts their figures and tables take in the page's language (labels.py) and
the ring animation the Questions view and the timeline both play (ring_animation.py).
"""
