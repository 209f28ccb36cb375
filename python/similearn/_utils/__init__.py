"""similearn's shared plumbing (private): input validation (``validation``, ``targets``,
``label_forms``), declarative parameter tables (``params``), memory budgets (``memory``), and
model files (``serialization``, ``integrity``).  Every model package imports from here; nothing
here imports a model."""
