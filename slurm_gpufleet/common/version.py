"""The package's version (pyproject.toml's): the plan and the installed wrappers say which one made them."""

__version__ = "0.1.0"
