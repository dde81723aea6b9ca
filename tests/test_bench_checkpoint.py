"""bench checkpoint's table and its np.save yardstick (pure: no launches)."""
from mpikanel.bench.checkpoint import format_table, np_save_s


def test_table_gives_each_checkpoint_its_ratios():
    row = {"seed": 1, "seq": 2, "reason": "periodic", "files": 10, "bytes": 6_000_000, "np_save_s": 0.5,
           "write_s": 1.0, "write_vs_np_save": 2.0, "hold_s": 0.25, "pause_s": 1.25, "pause_vs_write": 1.25,
           "server0_part_s": 0.1, "slowest_part_s": 0.3, "dense_bytes": 1_440_000_000, "np_save_dense_s": 2.0,
           "write_vs_dense": 0.5}
    assert ("| 1 | 2 | periodic | 10 | 6 | 0.50 | 1.00 | 2.00 | 0.25 | 1.25 | 1.25 | 0.10 | 0.30 | 1440 | 2.00 | 0.50 |"
            in format_table([row]))


def test_the_dense_yardstick_counts_every_server_range_and_two_vectors_per_worker():
    from mpikanel.bench.checkpoint import dense_bytes

    assert dense_bytes(10_000_000, 8) == 8 * 10_000_000 * 18      # 1.44 GB: the 6059cad checkpoint's size


def test_the_yardstick_file_is_written_and_removed(tmp_path):
    assert np_save_s(tmp_path, 80_000) > 0 and list(tmp_path.iterdir()) == []
