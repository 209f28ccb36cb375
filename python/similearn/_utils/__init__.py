"""similearn's shared plumbing (private): input validation (``validation``, ``targets``,
``label_forms``), declarative parameter tables (``params``), memory budgets (``memory``), model
files (``serialization``, ``integrity``, and ``registry``, the one list of public estimator
classes), the models' exact linear map (``linear_map``), duration formatting
(``timing_format``), and the NumPy implementations both tests/ and bench/ use (``oracles``).
Every model package imports from here; nothing here imports a model (``registry`` finds the
classes by the names of their public modules when a file is read)."""
