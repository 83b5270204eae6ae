"""batchfit's Qt-free core: model and hardware catalogs, memory and time estimates."""

__version__ = '0.1.0'
