"""fitplan: does training fit, and how should it be split? See README.md."""
__version__ = "0.1.0"
