"""The second MPI's pick of end-to-end tests inside CI's time."""
from second_mpi import matches, pick


def test_the_must_run_tests_stay_and_the_quickest_fill_the_budget():
    ids = ["t.py::slow", "t.py::quick", "t.py::must", "t.py::mid", "m.py::a", "m.py::b"]
    times = {"t.py::slow": 50, "t.py::quick": 1, "t.py::must": 40, "t.py::mid": 5, "m.py::a": 2, "m.py::b": 3}
    kept, left, spent = pick(ids, times, ("t.py::must", "m.py"), budget_s=50)
    assert kept == ["t.py::must", "m.py::a", "m.py::b", "t.py::quick"] and spent == 46
    assert left == ["t.py::mid", "t.py::slow"]


def test_an_untimed_test_is_left_to_the_full_run_and_a_module_names_its_tests():
    kept, left, _ = pick(["a.py::x", "a.py::new"], {"a.py::x": 1}, (), budget_s=100)
    assert kept == ["a.py::x"] and left == ["a.py::new"]
    assert matches("m.py::a[1]", "m.py") and not matches("m.py2::a", "m.py")
