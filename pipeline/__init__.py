"""tfrecord-etl: tables (Parquet, CSV) -> sharded tf.train.Example TFRecords, on Apache Beam."""

__version__ = "0.1.0"
