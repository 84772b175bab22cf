"""What the notebooks in ``notebooks/`` share, so each notebook stays short; notebook-only code.

One module per job, each importable on its own (the core package never imports this one, and
nothing here loads matplotlib, IPython or ipywidgets until a function draws or displays):

* :mod:`~agentlab.notebooks.kernel` — set a kernel up (working directory, data and cache
  locations, plot defaults), run a coroutine from a cell, the smoke-test banner, HTML layout;
* :mod:`~agentlab.notebooks.papers` — the published numbers of ``data/published_results.toml``;
* :mod:`~agentlab.notebooks.results` — make sure a results file holds the runs a notebook shows
  (through the CLI, resumably) and read them back per run;
* :mod:`~agentlab.notebooks.subsets` — smaller copies of the data for smoke runs on a slow model;
* :mod:`~agentlab.notebooks.plots` — the charts the analysis notebooks share;
* :mod:`~agentlab.notebooks.provenance` — what a figure's title says made it (a model, the smoke
  test, the test server), and the recorder the notebook test checks titles with;
* :mod:`~agentlab.notebooks.comparison` — the policy-comparison widget (Pareto plot and tables);
* :mod:`~agentlab.notebooks.runtime_tour` — agents and pictures of the runtime tour: requests
  kept for inspection, tool calls chosen by the caller, the ledger against the context;
* :mod:`~agentlab.notebooks.explorer` (with :mod:`~agentlab.notebooks.ledgers`) — the
  compaction-policy explorer.
"""
