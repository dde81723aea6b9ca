"""Worker-side schedules over scripted timings (pure, no MPI)."""
import pytest

from mpikanel.sync import Action, EspSchedule, PspSchedule, Schedule, WorkerState


def drive(schedule, step_s, rtt_s, steps=200, busy=0, rtt_alpha=0.3):
    """Simulate a worker: every push completes after rtt_s (polled at step ends); returns decisions."""
    st = WorkerState()
    schedule.setup(st, 1, 0)
    st.max_skip = getattr(schedule, "max_skip", 0)     # no per-worker jitter here: the bound itself
    t = 0.0
    reply_at = None
    decisions, max_consecutive, run = [], 0, 0
    for _ in range(steps):
        t += step_s
        st.unsent_steps += 1
        st.unsent_compute_s += step_s
        st.steps_since_reply += 1
        if st.pending:
            st.steps_while_pending += 1
            if t >= reply_at:
                st.pending = False
                st.observe_rtt(rtt_s, rtt_alpha)
                st.busy = busy
        a = schedule.decide(st)
        decisions.append(a)
        if a == Action.CONTINUE and not st.pending:
            st.skips += 1
            run += 1
            max_consecutive = max(max_consecutive, run)
        elif a in (Action.PUSH, Action.PUSH_AND_WAIT):
            run = 0
            st.unsent_steps, st.unsent_compute_s, st.skips = 0, 0.0, 0
            if a == Action.PUSH_AND_WAIT:
                t += rtt_s
                st.observe_rtt(rtt_s, rtt_alpha)
            else:
                st.pending, st.steps_while_pending, reply_at = True, 0, t + rtt_s
        elif a == Action.WAIT:
            t = max(t, reply_at)
            st.pending = False
            st.observe_rtt(rtt_s, rtt_alpha)
    return decisions, max_consecutive


def test_blocking_schedule_pushes_every_step():
    assert Schedule().decide(WorkerState()) == Action.PUSH_AND_WAIT


def test_esp_always_efficient_never_skips():
    decisions, longest = drive(EspSchedule(rho=1.0, max_skip=8), step_s=0.010, rtt_s=0.001)
    assert longest == 0
    assert Action.PUSH_AND_WAIT not in decisions


def test_esp_skips_below_its_value_floor_whatever_a_push_costs():
    sch = EspSchedule(rho=1.0, max_skip=8, value_low=2.0)   # a floor of 2 typical steps' worth
    free = dict(probe_rtt_s=0.001, probe_service_s=0.0001, update_norm=1.0, unsent_norm=1.5)
    st = _esp_state(**free)
    assert sch.decide(st) == Action.CONTINUE and st.skip_reason == "value"
    assert EspSchedule(rho=1.0, max_skip=8, value_low=0).decide(_esp_state(**free)) == Action.PUSH
    assert sch.decide(_esp_state(**{**free, "unsent_norm": 2.0})) == Action.PUSH
    # cheap pushes and no norm yet: the steps are the worth, so it pushes every second step
    decisions, longest = drive(sch, step_s=0.010, rtt_s=0.001)
    assert longest == 1 and Action.PUSH_AND_WAIT not in decisions


@pytest.mark.parametrize("max_skip", [0, 1, 4, 8])
def test_esp_slow_server_skips_up_to_the_bound(max_skip):
    decisions, longest = drive(EspSchedule(rho=1.0, max_skip=max_skip), step_s=0.001, rtt_s=0.050)
    assert longest == max_skip                      # skips as much as allowed, never more
    assert Action.PUSH_AND_WAIT in decisions or max_skip == 0


def test_esp_skips_while_the_servers_queue_is_long_and_pushes_once_it_is_short():
    sch = EspSchedule(rho=1.0, max_skip=8)
    # 2 steps of 5 ms carry 10 ms of training; the server takes 2 ms a push
    long_queue = _esp_state(probe_rtt_s=0.001, probe_queued=9, probe_service_s=0.002)
    assert sch.decide(long_queue) == Action.CONTINUE and long_queue.skip_reason == "busy"
    short_queue = _esp_state(probe_rtt_s=0.001, probe_queued=3, probe_service_s=0.002)
    assert sch.decide(short_queue) == Action.PUSH
    # the queue grows what a push must carry: more unsent work pays for the same queue
    long_queue.unsent_steps, long_queue.unsent_compute_s = 5, 0.025
    assert sch.decide(long_queue) == Action.PUSH


def test_esp_waits_for_an_exchange_stuck_in_flight():
    st = WorkerState(pending=True, steps_while_pending=8, max_skip=8)
    assert EspSchedule(max_skip=8).decide(st) == Action.WAIT
    st.steps_while_pending = 3
    assert EspSchedule(max_skip=8).decide(st) == Action.CONTINUE


def test_esp_jitters_max_skip_per_worker_within_the_bound():
    bounds = []
    for rank in range(1, 65):
        st = WorkerState()
        EspSchedule(max_skip=8).setup(st, rank, seed=3)
        bounds.append(st.max_skip)
    assert set(bounds) <= set(range(4, 9)) and len(set(bounds)) >= 4     # spread over [8 - 8 // 2, 8]
    again = WorkerState()
    EspSchedule(max_skip=8).setup(again, 5, seed=3)
    assert again.max_skip == bounds[4]                                   # seeded: same worker, same bound
    for max_skip in (0, 1):
        st = WorkerState()
        EspSchedule(max_skip=max_skip).setup(st, 2, seed=0)
        assert st.max_skip == max_skip


def _esp_state(**kw) -> WorkerState:
    st = WorkerState(max_skip=8, unsent_steps=2, unsent_compute_s=0.010, rtt_ewma=0.002)
    for k, v in kw.items():
        setattr(st, k, v)
    return st


def test_esp_cost_counts_the_queue_the_service_time_and_the_payload():
    sch = EspSchedule(rho=1.0, max_skip=8)
    # 3 queued x 2 ms + this push's own 3 ms (payload beyond a probe) = 9 ms <= 10 ms carried: push
    st = _esp_state(probe_rtt_s=0.001, probe_queued=3, probe_service_s=0.002, payload_s=0.003)
    assert sch.cost(st) == pytest.approx(0.009)
    assert sch.decide(st) == Action.PUSH
    st.payload_s = 0.005                                     # 11 ms > 10 ms: the queue made it dear
    assert sch.decide(st) == Action.CONTINUE and st.skip_reason == "busy"
    st.probe_queued, st.payload_s = 0, 0.012                 # dearer than it carries even at an idle server
    assert sch.decide(st) == Action.CONTINUE and st.skip_reason == "value"
    # a push costs at least one service time, even when its payload was never seen to add anything
    assert sch.cost(_esp_state(probe_rtt_s=0.001, probe_service_s=0.004)) == pytest.approx(0.004)
    # a probe still unanswered after 30 ms of compute: the server is at least that far away
    st = _esp_state(probe_rtt_s=0.001, probing=True, probe_out_s=0.030)
    assert sch.decide(st) == Action.CONTINUE
    # without probes (ablation) the past push round trips decide
    off = EspSchedule(rho=1.0, max_skip=8, probe=False)
    assert off.cost(st) == 0.002 and off.decide(st) == Action.PUSH
    assert not off.uses_probes and sch.uses_probes


def test_esp_weighs_what_the_delta_carries_against_what_the_push_costs():
    sch = EspSchedule(rho=1.0, max_skip=8, value_high=4.0)
    # 2 steps of 5 ms, a push costs 8 ms of the cluster
    st = _esp_state(probe_rtt_s=0.001, probe_service_s=0.008, update_norm=1.0)
    st.unsent_norm = 2.0                       # 2 typical steps' worth: 10 ms of training >= 8 ms
    assert sch.decide(st) == Action.PUSH
    st.unsent_norm = 1.0                       # the steps cancelled out: 5 ms < 8 ms, skip (LAG-like)
    assert sch.decide(st) == Action.CONTINUE and st.skip_reason == "value"
    dear = _esp_state(rtt_ewma=1.0, update_norm=1.0, unsent_norm=5.0)   # far drifted: push even when dear
    assert sch.decide(dear) == Action.PUSH
    novalue = EspSchedule(rho=1.0, max_skip=8, value=False)   # the steps themselves are the worth
    st.unsent_norm = 1.0
    assert novalue.decide(st) == Action.PUSH
    assert novalue.decide(_esp_state(rtt_ewma=1.0, update_norm=1.0, unsent_norm=5.0)) == Action.CONTINUE
    assert sch.needs_norm and not novalue.needs_norm


def test_esp_without_the_efficiency_test_pushes_whenever_nothing_is_in_flight():
    sch = EspSchedule(rho=1.0, max_skip=3, efficiency=False)
    assert sch.decide(_esp_state(rtt_ewma=10.0, max_skip=3)) == Action.PUSH
    assert sch.decide(_esp_state(skips=3, max_skip=3)) == Action.PUSH_AND_WAIT    # the bound stays
    assert not sch.uses_probes and not sch.needs_norm


def test_psp_runs_the_planned_steps_then_pushes_and_trains_while_waiting():
    sch = PspSchedule(max_wait_steps=4)
    st = WorkerState(plan=5, steps_since_reply=4)
    assert sch.decide(st) == Action.CONTINUE
    st.steps_since_reply = 5
    assert sch.decide(st) == Action.PUSH
    st.pending, st.steps_while_pending = True, 2
    assert sch.decide(st) == Action.CONTINUE
    st.steps_while_pending = 4
    assert sch.decide(st) == Action.WAIT


def test_psp_trains_while_waiting_no_longer_than_its_plan():
    sch = PspSchedule(max_wait_steps=8)
    st = WorkerState(plan=1, pending=True, steps_while_pending=1)
    assert sch.decide(st) == Action.WAIT


def test_lag_skips_small_updates_whatever_a_push_costs():
    lag = EspSchedule(rho=1.0, max_skip=8, lag=2.0)
    small = _esp_state(probe_rtt_s=0.001, update_norm=1.0, unsent_norm=1.5)     # a free push, little to say
    assert lag.decide(small) == Action.CONTINUE and small.skip_reason == "value"
    big = _esp_state(rtt_ewma=5.0, update_norm=1.0, unsent_norm=2.5)            # a dear push, much to say
    assert lag.decide(big) == Action.PUSH
    assert lag.decide(_esp_state(skips=8, update_norm=1.0, unsent_norm=0.1)) == Action.PUSH_AND_WAIT
    assert not lag.uses_probes

