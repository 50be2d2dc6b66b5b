"""Performance model: GPU datasheet peaks (``datasheet.py``), FLOPs and bytes per op from recorded
shapes (``opcost.py``) and the per-category roofline with MFU (``roofline.py``), after TraceLens's
perf model (github.com/AMD-AGI/TraceLens, ``TraceLens/PerfModel``)."""
