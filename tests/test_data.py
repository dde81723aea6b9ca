"""Tests for mpikanel.data."""


import h5py
import numpy as np
import pytest

from mpikanel.data import DataInfo, DataSpec, Shard, describe, load_rows, load_test, shard_range
from mpikanel.errors import InputError
from mpikanel.kernels import CSR
from need import needs_fashion



def _small_synth(**kw) -> DataSpec:
    return DataSpec(synthetic_rows=10_000, synthetic_features=12, synthetic_classes=4, **kw)


def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


# --- synthetic -----------------------------------------------------------------------------


def test_synthetic_describe_and_types():
    spec = _small_synth()
    info = describe(spec)
    assert info == DataInfo(9000, 12, 4, "synthetic 10000x12, 4 classes", (0, 1, 2, 3), "--synthetic-features 12", 48)
    shard = load_rows(spec, info, 0, 100)
    assert isinstance(shard, Shard)
    assert shard.X.dtype == np.float32 and shard.X.flags.c_contiguous
    assert shard.X.shape == (100, 12)
    assert shard.y.dtype == np.int32 and shard.y.shape == (100,)


def test_synthetic_deterministic_and_range_equals_slice():
    spec = _small_synth(seed=3)
    info = describe(spec)
    full = load_rows(spec, info, 0, info.n_rows)
    again = load_rows(spec, info, 0, info.n_rows)
    np.testing.assert_array_equal(full.X, again.X)
    np.testing.assert_array_equal(full.y, again.y)
    for start, stop in [(0, 1), (4000, 4200), (4095, 8193), (8999, 9000), (17, 17)]:
        part = load_rows(spec, info, start, stop)
        np.testing.assert_array_equal(part.X, full.X[start:stop])
        np.testing.assert_array_equal(part.y, full.y[start:stop])
    other = load_rows(_small_synth(seed=4), info, 0, 100)
    assert not np.array_equal(other.X, full.X[:100])


def test_synthetic_test_is_tail_of_same_generator():
    spec = _small_synth()
    info = describe(spec)
    everything = load_rows(spec, describe(_small_synth(test_fraction=0.0)), 0, 10_000)
    test = load_test(spec, info)
    assert test.X.shape == (1000, 12)
    np.testing.assert_array_equal(test.X, everything.X[9000:])
    np.testing.assert_array_equal(test.y, everything.y[9000:])


@pytest.mark.parametrize("classes", [2, 10])
def test_synthetic_is_learnable_but_noisy(classes):
    spec = DataSpec(synthetic_rows=20_000, synthetic_features=20, synthetic_classes=classes)
    info = describe(spec)
    train, test = load_rows(spec, info, 0, info.n_rows), load_test(spec, info)
    assert set(np.unique(train.y)) == set(range(classes))
    w = np.linalg.lstsq(train.X, np.eye(classes)[train.y], rcond=None)[0]
    acc = np.mean(np.argmax(test.X @ w, axis=1) == test.y)
    assert 0.7 < acc < 0.97


def test_test_fraction_zero_gives_empty_test_and_bad_fraction_rejected():
    spec = _small_synth(test_fraction=0.0)
    info = describe(spec)
    assert info.n_rows == 10_000
    test = load_test(spec, info)
    assert test.X.shape == (0, 12) and test.y.shape == (0,)
    with pytest.raises(InputError, match="test fraction"):
        describe(_small_synth(test_fraction=1.0))


def test_load_rows_checks_range():
    spec = _small_synth()
    info = describe(spec)
    for start, stop in [(-1, 5), (5, 4), (0, 9001)]:
        with pytest.raises(InputError, match="row range"):
            load_rows(spec, info, start, stop)


# --- shard_range ---------------------------------------------------------------------------


@pytest.mark.parametrize("n_rows,n_parts", [(10, 3), (7, 7), (3, 5), (100_000, 6), (0, 2)])
def test_shard_range_balanced_and_covering(n_rows, n_parts):
    ranges = [shard_range(n_rows, n_parts, p) for p in range(n_parts)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n_rows
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    sizes = [stop - start for start, stop in ranges]
    assert max(sizes) - min(sizes) <= 1


def test_shard_range_rejects_bad_part():
    with pytest.raises(InputError):
        shard_range(10, 2, 2)


# --- npz / h5 ------------------------------------------------------------------------------


def _dense_data(rows=50, features=7, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, features))
    y = rng.integers(0, 3, rows) * 2 + 1  # labels 1, 3, 5
    y[:3] = [1, 3, 5]
    return X, y


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
@pytest.mark.parametrize("order", ["C", "F"])
def test_npz_row_range_equals_full_load(tmp_path, save, order):
    X, y = _dense_data()
    path = str(tmp_path / "d.npz")
    save(path, X=np.asarray(X, order=order), y=y)
    spec = DataSpec(source=path, test_fraction=0.2)
    info = describe(spec)
    assert (info.n_rows, info.n_features, info.n_classes) == (40, 7, 3)
    assert info.label_values == (1, 3, 5)
    full = load_rows(spec, info, 0, 40)
    np.testing.assert_array_equal(full.X, X[:40].astype(np.float32))
    np.testing.assert_array_equal(full.y, (y[:40] - 1) // 2)
    part = load_rows(spec, info, 13, 29)
    np.testing.assert_array_equal(part.X, full.X[13:29])
    np.testing.assert_array_equal(part.y, full.y[13:29])
    test = load_test(spec, info)
    np.testing.assert_array_equal(test.X, X[40:].astype(np.float32))


def test_npz_missing_array_lists_present(tmp_path):
    path = str(tmp_path / "d.npz")
    np.savez(path, features=np.zeros((3, 2)), y=np.zeros(3))
    with pytest.raises(InputError, match=r"missing array\(s\) X; arrays present: features, y"):
        describe(DataSpec(source=path))


def test_npz_shape_errors(tmp_path):
    path = str(tmp_path / "d.npz")
    np.savez(path, X=np.zeros(5), y=np.zeros(5))
    with pytest.raises(InputError, match="X must be 2-D"):
        describe(DataSpec(source=path))
    np.savez(path, X=np.zeros((5, 2)), y=np.zeros(4))
    with pytest.raises(InputError, match="y has 4 labels but X has 5 rows"):
        describe(DataSpec(source=path))
    np.savez(path, X=np.zeros((0, 2)), y=np.zeros(0))
    with pytest.raises(InputError, match="empty"):
        describe(DataSpec(source=path))


@pytest.mark.parametrize("suffix", [".h5", ".hdf5"])
def test_h5_row_range_equals_full_load(tmp_path, suffix):
    X, y = _dense_data()
    path = str(tmp_path / ("d" + suffix))
    with h5py.File(path, "w") as f:
        f["X"] = X.astype(np.float32)
        f["y"] = y
    spec = DataSpec(source=path, test_fraction=0.0)
    info = describe(spec)
    assert (info.n_rows, info.n_features, info.label_values) == (50, 7, (1, 3, 5))
    full = load_rows(spec, info, 0, 50)
    np.testing.assert_array_equal(full.X, X.astype(np.float32))
    part = load_rows(spec, info, 20, 31)
    np.testing.assert_array_equal(part.X, full.X[20:31])
    np.testing.assert_array_equal(part.y, full.y[20:31])


def test_h5_missing_dataset(tmp_path):
    path = str(tmp_path / "d.h5")
    with h5py.File(path, "w") as f:
        f["X"] = np.zeros((3, 2))
    with pytest.raises(InputError, match=r"missing dataset\(s\) y; present: X"):
        describe(DataSpec(source=path))


# --- libsvm --------------------------------------------------------------------------------


def test_libsvm_one_based_comments_qid_binary(tmp_path):
    path = _write(
        tmp_path / "a.txt",
        "# header comment\n"
        "+1 qid:3 1:0.5 3:2   # trailing comment\n"
        "\n"
        "-1 2:-1.5\n"
        "+1 4:1e-1 1:1\n",
    )
    spec = DataSpec(source=path, test_fraction=0.0)
    info = describe(spec)
    assert (info.n_rows, info.n_features, info.n_classes, info.label_values) == (3, 4, 2, (-1, 1))
    shard = load_rows(spec, info, 0, 3)
    expected = np.array([[0.5, 0, 2, 0], [0, -1.5, 0, 0], [1, 0, 0, 0.1]], dtype=np.float32)
    assert isinstance(shard.X, CSR) and shard.X.shape == (3, 4) and shard.X.nnz == 5  # never densified
    np.testing.assert_array_equal(shard.X.indptr, [0, 2, 3, 5])
    np.testing.assert_array_equal(shard.X.toarray(), expected)
    np.testing.assert_array_equal(shard.y, [1, 0, 1])
    part = load_rows(spec, info, 1, 3).X
    np.testing.assert_array_equal(part.indptr, [0, 1, 3])
    np.testing.assert_array_equal(part.toarray(), expected[1:])


def test_libsvm_zero_based_applies_to_test_file(tmp_path):
    train = _write(tmp_path / "tr.svm", "1 0:1 2:3\n2 1:4\n3 0:5\n")
    test = _write(tmp_path / "te.svm", "2 1:7\n")  # no index 0 here, still 0-based
    spec = DataSpec(source=train, test_source=test)
    info = describe(spec)
    assert (info.n_rows, info.n_features, info.label_values) == (3, 3, (1, 2, 3))
    np.testing.assert_array_equal(load_rows(spec, info, 0, 1).X.toarray(), [[1, 0, 3]])
    shard = load_test(spec, info)
    np.testing.assert_array_equal(shard.X.toarray(), [[0, 7, 0]])
    np.testing.assert_array_equal(shard.y, [1])


def test_libsvm_n_features_override(tmp_path):
    path = _write(tmp_path / "a.svm", "0 1:1\n1 2:1\n")
    info = describe(DataSpec(source=path, test_fraction=0.0, n_features=5))
    assert info.n_features == 5
    with pytest.raises(InputError, match=r"a\.svm:2: feature index 2 exceeds n_features=1"):
        describe(DataSpec(source=path, n_features=1))


@pytest.mark.parametrize(
    "line,what",
    [
        ("1 3:x", "bad feature value"),
        ("abc 1:2", "bad label"),
        ("1 3", "expected index:value"),
        ("1 -2:1", "negative feature index"),
        ("1 q:1", "bad feature index"),
    ],
)
def test_libsvm_malformed_line_names_file_and_line(tmp_path, line, what):
    path = _write(tmp_path / "bad.svm", f"# c\n1 1:1\n{line}\n")
    with pytest.raises(InputError, match=rf"bad\.svm:3: {what}"):
        describe(DataSpec(source=path))


def test_libsvm_nan_names_row_and_line(tmp_path):
    path = _write(tmp_path / "n.svm", "1 1:1\n\n0 1:nan\n")
    spec = DataSpec(source=path, test_fraction=0.0)
    info = describe(spec)
    with pytest.raises(InputError, match=r"n\.svm: non-finite .* row 1 \(line 3\)"):
        load_rows(spec, info, 0, 2)


# --- validation ----------------------------------------------------------------------------


def test_nan_in_features_names_global_row(tmp_path):
    X, y = _dense_data()
    X[23, 4] = np.inf
    path = str(tmp_path / "d.npz")
    np.savez(path, X=X, y=y)
    spec = DataSpec(source=path)
    info = describe(spec)
    load_rows(spec, info, 0, 23)
    bad_row = r"d\.npz: non-finite feature value \(NaN/inf\) at row 23$"
    with pytest.raises(InputError, match=bad_row):
        load_rows(spec, info, 20, 30)


def test_non_integer_label(tmp_path):
    X, _ = _dense_data(rows=20)
    y = np.zeros(20)
    y[17] = 0.5
    path = str(tmp_path / "d.npz")
    np.savez(path, X=X, y=y)
    with pytest.raises(InputError, match="y has non-integer label 0.5 at row 17"):
        describe(DataSpec(source=path))


def test_test_label_unseen_in_train(tmp_path):
    train = _write(tmp_path / "tr.svm", "1 1:1\n2 2:1\n")
    test = _write(tmp_path / "te.svm", "1 1:1\n7 2:1\n")
    spec = DataSpec(source=train, test_source=test)
    info = describe(spec)
    with pytest.raises(InputError, match=r"te\.svm: label 7 at row 1 \(line 2\) does not occur"):
        load_test(spec, info)


def test_feature_mismatch(tmp_path):
    X, y = _dense_data()
    train, test = str(tmp_path / "tr.npz"), str(tmp_path / "te.h5")
    np.savez(train, X=X, y=y)
    with h5py.File(test, "w") as f:
        f["X"] = X[:, :5]
        f["y"] = y
    spec = DataSpec(source=train, test_source=test)
    info = describe(spec)
    expected = rf"feature-count mismatch: train has 7 features, test \({test}\) has 5"
    with pytest.raises(InputError, match=expected):
        load_test(spec, info)
    svm = _write(tmp_path / "te.svm", "1 9:1\n")
    with pytest.raises(InputError, match=r"mismatch: train has 7 features, test .* has 9"):
        load_test(DataSpec(source=train, test_source=svm), info)


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.npz")
    with pytest.raises(InputError, match=f"^{path}: no such file$"):
        describe(DataSpec(source=path))
    with pytest.raises(InputError, match=f"^{path}: no such file$"):
        describe(DataSpec(test_source=path))


def test_missing_fashion_dir(tmp_path):
    with pytest.raises(InputError, match="apt-get install dataset-fashion-mnist.*--data-dir"):
        describe(DataSpec(source="fashion-mnist", data_dir=str(tmp_path)))


def test_bad_idx_magic(tmp_path):
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        (tmp_path / name).write_bytes(b"\x00\x00\x09\x03" + bytes(16))
    with pytest.raises(InputError, match="bad magic number"):
        describe(DataSpec(source="fashion-mnist", data_dir=str(tmp_path)))


# --- fashion-mnist -------------------------------------------------------------------------


@needs_fashion
def test_fashion_mnist_small_ranges():
    spec = DataSpec(source="fashion-mnist")
    info = describe(spec)
    assert (info.n_rows, info.n_features, info.n_classes) == (60000, 784, 10)
    assert info.label_values == tuple(range(10))
    shard = load_rows(spec, info, 59_990, 60_000)
    assert shard.X.shape == (10, 784) and shard.X.dtype == np.float32
    assert 0.0 <= shard.X.min() and shard.X.max() <= 1.0
    assert shard.y.dtype == np.int32 and shard.y.max() <= 9
    test = load_test(spec, info)
    assert test.X.shape == (10000, 784) and test.y.shape == (10000,)


def test_libsvm_large_sparse_stays_csr_and_tail_split(tmp_path):
    rng = np.random.default_rng(0)
    lines = []
    for i in range(200):
        cols = np.sort(rng.choice(100_000, 5, replace=False)) + 1
        lines.append(f"{i % 3} " + " ".join(f"{c}:{v:.3f}" for c, v in zip(cols, rng.random(5) + 0.1)))
    path = _write(tmp_path / "big.svm", "\n".join(lines) + "\n")
    spec = DataSpec(source=path, test_fraction=0.25)
    info = describe(spec)
    assert (info.n_rows, info.n_classes) == (150, 3) and info.n_features >= 99_000
    train, test = load_rows(spec, info, 10, 60), load_test(spec, info)
    for part, rows in ((train, 50), (test, 50)):
        assert isinstance(part.X, CSR) and part.X.shape == (rows, info.n_features) and part.X.nnz == 5 * rows
        assert part.X.nbytes < 100_000  # a dense block would be 20 MB
    assert test.X.indices.dtype == np.int32 and test.X.indptr[0] == 0


def _sparse(**kw):
    from mpikanel.data import DataSpec
    from mpikanel.data.sources import open_train
    spec = DataSpec(source="synthetic-sparse", seed=kw.pop("seed", 3), synthetic_rows=kw.pop("rows", 10_000),
                    synthetic_features=kw.pop("features", 100_000), **kw)
    return open_train(spec)


def test_synthetic_sparse_rows_are_the_same_whatever_range_reads_them():
    src = _sparse()
    X, y = src.read(0, 10_000)
    part, y_part = src.read(4000, 6000)                     # crosses a chunk boundary
    whole = X.rows(4000, 6000)
    assert np.array_equal(part.indptr, whole.indptr) and np.array_equal(part.indices, whole.indices)
    assert np.array_equal(part.data, whole.data) and np.array_equal(y_part, y[4000:6000])
    other, _ = _sparse(seed=4).read(0, 100)
    assert not np.array_equal(other.indices, X.rows(0, 100).indices)


def test_synthetic_sparse_rows_are_sorted_unique_and_power_law():
    X, y = _sparse(sparse_nnz=50).read(0, 10_000)
    lengths = np.diff(X.indptr)
    assert lengths.min() >= 1 and lengths.max() <= 50 and lengths.mean() > 20
    for r in range(0, 10_000, 997):
        row = X.indices[X.indptr[r]:X.indptr[r + 1]]
        assert (np.diff(row) > 0).all()                     # sorted, no duplicates
    counts = np.bincount(X.indices, minlength=100_000)
    assert counts[0] == counts.max() and counts[:100].sum() > 10 * counts[-50_000:].sum()
    assert (X.data == 1.0).all() and set(np.unique(y)) == {0, 1} and 0.3 < y.mean() < 0.7


@pytest.mark.parametrize("values", ["binary", "tfidf"])
def test_synthetic_sparse_labels_follow_the_true_weights(values):
    src = _sparse(sparse_values=values, features=1_000_000, seed=0)
    X, y = src.read(0, 10_000)
    if values == "tfidf":
        norms = np.sqrt(np.add.reduceat(X.data.astype(np.float64) ** 2, X.indptr[:-1]))
        assert np.allclose(norms, 1.0, atol=1e-5)
    margin = np.add.reduceat(X.data * src.true_weights(X.indices.astype(np.int64)), X.indptr[:-1])
    assert ((margin > src.bias) == (y == 1)).mean() > 0.75   # the Bayes rule is well above chance
    assert abs((margin > src.bias).mean() - 0.5) < 0.03      # the bias centres the classes ...
    assert 0.4 < y.mean() < 0.6                              # ... so they are balanced


def test_synthetic_sparse_scales_to_ten_million_features_without_a_table():
    X, _ = _sparse(features=10_000_000, rows=4096, sparse_values="tfidf").read(0, 4096)
    assert X.shape == (4096, 10_000_000) and X.indices.max() < 10_000_000


def test_synthetic_sparse_bad_options_are_clear():
    from mpikanel.errors import InputError
    with pytest.raises(InputError, match="sparse-values"):
        _sparse(sparse_values="counts")
    with pytest.raises(InputError, match="sparse-alpha"):
        _sparse(sparse_alpha=0.0)
