"""Plain NumPy implementations of kernels that both the tests and the benches need: the
oracles tests/ checks the C++ kernels against, and the NumPy baselines bench/ times them
against (``frml``: FRML's steps, Alg. 1; ``ssne``: SSNE's epoch; ``interaction_map``:
MAP@k on interactions).  They live here, importable by both, so that bench/ imports
nothing from tests/; the other oracles, which only the tests use, stay in tests/.
Not imported by similearn itself."""
