"""`tfrecord-etl report`: a self-contained `report.html` from an output's manifest and
statistics (pipeline/report/write.py). Imports neither Beam nor TensorFlow for a local output.

May import: pipeline.output and transforms/.
"""

from pipeline.output.directory import REPORT_NAME

__all__ = ["REPORT_NAME"]
