"""Real Iceberg tables for the reliability scenarios, built with pyiceberg.

``big_table`` is ``build_table``'s richest shape (partitioned, delete files,
statistics, capped metadata log) plus one more snapshot whose single manifest
names ``entries`` data files, so a cleanup spends long enough inside one
manifest's deletes to be killed or paused there.
"""

from __future__ import annotations

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from tests.support.iceberg import Warehouse

CAPPED = {"write.metadata.previous-versions-max": "2"}
BULK_DIR = "/data/bulk/"


def big_table(wh: Warehouse, name: str, entries: int) -> Table:
    table = wh.build(
        name, partitioned=True, with_deletes=True, with_statistics=True, properties=CAPPED
    )
    location = table.location()
    files: list[DataFile] = []
    spec_id = table.spec().spec_id
    for i in range(entries):
        uri = f"{location}{BULK_DIR}part-{i:05d}.parquet"
        # The cleanup never reads data files: a small placeholder is enough.
        with table.io.new_output(uri).create(overwrite=True) as out:
            out.write(b"PAR1 placeholder PAR1")
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=uri,
            file_format=FileFormat.PARQUET,
            partition=Record("a"),
            record_count=1,
            file_size_in_bytes=21,
        )
        data_file.spec_id = spec_id
        files.append(data_file)
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for f in files:
            append.append_data_file(f)
    return wh.catalog.load_table(table.name())
