#: The version of similearn, a string such as ``"0.1.0"``.
__version__ = "0.1.0"
