"""The command's start runs without cyclic garbage collection; the job turns it back on."""

import gc

from pipeline.startup import gc_policy


def test_pause_then_resume_collects_again_and_resume_alone_changes_nothing():
    assert gc.isenabled()
    try:
        gc_policy.pause()
        assert not gc.isenabled()
        gc_policy.pause()  # idempotent
        gc_policy.resume()
        assert gc.isenabled() and gc.get_freeze_count() > 0  # what existed then is frozen
        gc.unfreeze()
        gc_policy.resume()  # nothing paused: no freeze, still enabled
        assert gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        gc.enable()


def test_a_paused_collector_stays_off_when_it_was_off_before():
    gc.disable()
    try:
        gc_policy.pause()  # not ours to turn back on
        gc_policy.resume()
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()
