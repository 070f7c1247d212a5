"""`tfrecord-etl report`: a self-contained `report.html` from an output's manifest and
statistics (pipeline/report/write.py). Imports neither Beam nor TensorFlow for a local output."""

REPORT_NAME = "report.html"

__all__ = ["REPORT_NAME"]
