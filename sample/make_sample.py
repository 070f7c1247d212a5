"""Regenerate the bundled sample tables (sample/trips.parquet, sample/trips.csv).

A small taxi-trip table shaped like real ETL input: nulls in most columns, real zeros,
strings, a variable-length list, a struct, a decimal, timestamps and a 2x2 int32 array.
Deterministic (fixed seed): `python sample/make_sample.py` rewrites the same bytes.
"""

from __future__ import annotations

import decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

ROWS = 2000
HERE = Path(__file__).parent


def _with_nulls(rng: np.random.Generator, values: list, fraction: float) -> list:
    mask = rng.random(len(values)) < fraction
    return [None if m else v for v, m in zip(values, mask, strict=True)]


def make_table(rows: int = ROWS, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    start = np.datetime64("2026-11-01T00:00:00", "us")
    pickup = start + rng.integers(0, 30 * 86400, rows).astype("timedelta64[s]")
    seconds = rng.gamma(2.0, 420.0, rows).round().astype(np.int32)
    miles = np.round(seconds / 3600 * rng.uniform(5, 25, rows), 2)
    fare = np.round(3.25 + miles * 2.25 + rng.normal(0, 1, rows).clip(-2, 2), 2)
    tips = np.where(rng.random(rows) < 0.4, 0.0, np.round(fare * rng.uniform(0.1, 0.25, rows), 2))
    companies = ["Flash Cab", "Taxi Affiliation Services", "Sun Taxi", "City Service", ""]
    payment = ["Credit Card", "Cash", "Mobile", "Prcard"]
    tag_pool = ["airport", "night", "surge", "shared", "long"]
    tags = [list(rng.choice(tag_pool, rng.integers(0, 4), replace=False)) for _ in range(rows)]
    route = [
        np.round(rng.normal(0, 1, rng.integers(0, 6)), 3).astype(np.float32).tolist()
        for _ in range(rows)
    ]
    grid = rng.integers(0, 50, (rows, 2, 2)).astype(np.int32)
    toll = [decimal.Decimal(f"{v:.2f}") for v in rng.choice([0.0, 0.0, 1.5, 2.75, 4.0], rows)]
    driver = [
        {"id": int(i), "rating": float(r)}
        for i, r in zip(
            rng.integers(1000, 1100, rows), np.round(rng.uniform(3.5, 5, rows), 1), strict=True
        )
    ]
    grid_type = pa.list_(pa.list_(pa.int32()))  # equal-length lists, as numpy users write
    return pa.table(
        {
            "trip_id": pa.array(np.arange(1, rows + 1, dtype=np.int64)),
            "pickup_time": pa.array(pickup, pa.timestamp("us")),
            "pickup_date": pa.array(pickup.astype("datetime64[D]"), pa.date32()),
            "trip_seconds": pa.array(_with_nulls(rng, seconds.tolist(), 0.05), pa.int32()),
            "trip_miles": pa.array(_with_nulls(rng, miles.tolist(), 0.05), pa.float64()),
            "fare": pa.array(_with_nulls(rng, fare.tolist(), 0.02), pa.float64()),
            "tips": pa.array(tips, pa.float32()),
            "passengers": pa.array(rng.integers(0, 5, rows), pa.int8()),
            "company": pa.array(
                _with_nulls(rng, rng.choice(companies, rows).tolist(), 0.2), pa.string()
            ),
            "payment_type": pa.array(rng.choice(payment, rows).tolist(), pa.string()),
            "airport": pa.array(rng.random(rows) < 0.15, pa.bool_()),
            "tags": pa.array(_with_nulls(rng, tags, 0.1), pa.list_(pa.string())),
            "route_offsets": pa.array(route, pa.list_(pa.float32())),
            "pickup_grid": pa.array(grid.tolist(), grid_type),
            "toll": pa.array(toll, pa.decimal128(8, 2)),
            "driver": pa.array(_with_nulls(rng, driver, 0.05)),
        }
    )


def main() -> None:
    table = make_table()
    pq.write_table(table, HERE / "trips.parquet", row_group_size=500)
    flat = table.select(
        [
            "trip_id",
            "pickup_time",
            "trip_seconds",
            "trip_miles",
            "fare",
            "tips",
            "passengers",
            "company",
            "payment_type",
            "airport",
        ]
    )
    pacsv.write_csv(flat, HERE / "trips.csv")
    print(f"wrote {table.num_rows} rows to {HERE / 'trips.parquet'} and {HERE / 'trips.csv'}")


if __name__ == "__main__":
    main()
