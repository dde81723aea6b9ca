"""bench scale's figures from run summaries (pure: no launches)."""
from mpikanel.bench.scale import format_table, row


def summary(k, busy, held, loss):
    return {"server_ranks": [{"bytes_received": 800 // k * 10, "busy_us_per_push": busy * (1 + i), "peak_rss_mb": 100.0}
                             for i in range(k)],
            "deltas_sent": 10, "push": "auto", "bytes_per_push": 1500.0, "bytes_sent": 15000,
            "bytes_received": 25000, "workers": 4, "n_params": 100, "wall_s": 1.0, "pushes_per_s": 10.0,
            "test_loss": loss, "test_accuracy": 0.5, "time_to_target_s": held, "target_loss": 0.6,
            "delta_sum_rel_error": 0.0, "load_avg_after": 1.0}


def test_rows_are_per_server_and_the_table_takes_medians_and_the_busiest_server():
    rows = [row("w", 2, "bsp", seed, summary(2, busy, held, loss))
            for seed, busy, held, loss in ((0, 100, 1.0, 0.5), (1, 300, 3.0, 0.7), (2, 200, 2.0, 0.6))]
    assert rows[0]["bytes_per_push_per_server"] == [400.0, 400.0]   # 4000 bytes over 10 pushes
    assert rows[1]["busy_us_per_push"] == [300, 600]
    table = format_table(rows)
    # busiest server's busy time, median over seeds: 200, 400, 600 -> 400; held 2.00; loss 0.6
    # push kB 1.5 and reply kB 2.5 (25000 bytes over 10 pushes)
    assert "| w | bsp | auto | 2 | 10 | 1.5 | 2.5 | 0.00 | 400 | 100 | 2.00 | 0.6000 |" in table


def test_a_run_that_never_held_the_target_is_counted_not_hidden():
    rows = [row("w", 1, "asp", s, summary(1, 100, held, 0.5)) for s, held in ((0, 1.0), (1, None), (2, 2.0))]
    assert "not held in 1/3" in format_table(rows)
