"""pyqtgraph behind snake_case wrappers: each plot is created once and updated in place."""
