"""The example pipeline end to end: produce, aggregate exactly once to parquet."""

from __future__ import annotations

from zkcoord.examples import pipeline

def test_example_pipeline_counts_every_record_once(spark, shared_cluster, tmp_path, capsys):
    shared_cluster.create_topic("events", 2)
    out = str(tmp_path / "agg")
    argv = ["--zookeeper", shared_cluster.zookeeper, "--topic", "events", "--out", out,
            "--available-now", "--max-offsets-per-trigger", "400"]
    assert pipeline.main(argv + ["--produce", "1000"]) == 0
    printed = capsys.readouterr().out
    assert "batch 0: 400 records" in printed
    assert pipeline.totals(spark, out) == {f"user-{k}": 100 for k in range(10)}
    # run again on the same checkpoint with more records: only the new ones are added
    assert pipeline.main(argv + ["--produce", "500"]) == 0
    assert pipeline.totals(spark, out) == {f"user-{k}": 150 for k in range(10)}
