"""Worker-side schedules over scripted timings (pure, no MPI)."""
import pytest

from mpikanel.sync import Action, EspSchedule, PspSchedule, Schedule, WorkerState


def drive(schedule, step_s, rtt_s, steps=200, busy=0, rtt_alpha=0.3):
    """Simulate a worker: every push completes after rtt_s (polled at step ends); returns decisions."""
    st = WorkerState()
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


@pytest.mark.parametrize("max_skip", [0, 1, 4, 8])
def test_esp_slow_server_skips_up_to_the_bound(max_skip):
    decisions, longest = drive(EspSchedule(rho=1.0, max_skip=max_skip), step_s=0.001, rtt_s=0.050)
    assert longest == max_skip                      # skips as much as allowed, never more
    assert Action.PUSH_AND_WAIT in decisions or max_skip == 0


def test_esp_skips_when_server_busy():
    _, longest = drive(EspSchedule(rho=1.0, max_skip=5, busy_max=2), step_s=0.010, rtt_s=0.001, busy=9)
    assert longest == 5


def test_esp_waits_for_an_exchange_stuck_in_flight():
    st = WorkerState(pending=True, steps_while_pending=8)
    assert EspSchedule(max_skip=8).decide(st) == Action.WAIT
    st.steps_while_pending = 3
    assert EspSchedule(max_skip=8).decide(st) == Action.CONTINUE


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
