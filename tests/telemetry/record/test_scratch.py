"""Scratch memory: temporaries carved from one reused buffer, up to a cap, CPU only."""

from __future__ import annotations

import torch

from telemetry.record.scratch import Scratch


def test_tensors_share_one_buffer_reused_across_calls():
    scratch = Scratch(torch.device("cpu"))
    a, b = scratch.tensors(((3, 5), torch.float64), ((7,), torch.int16))
    assert (a.shape, a.dtype, b.shape, b.dtype) == ((3, 5), torch.float64, (7,), torch.int16)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert b.data_ptr() - a.data_ptr() == 128  # 120 bytes, aligned to 64
    a.fill_(1.0)
    b.fill_(2)
    assert bool((a == 1.0).all()) and bool((b == 2).all())  # no overlap
    held = scratch.held_bytes
    (c,) = scratch.tensors(((4,), torch.float32))  # smaller: the same buffer
    assert c.data_ptr() == a.data_ptr() and scratch.held_bytes == held


def test_larger_requests_grow_the_buffer_up_to_the_cap_then_get_fresh_tensors():
    scratch = Scratch(torch.device("cpu"), max_bytes=1024)
    scratch.tensors(((16,), torch.float64))
    assert scratch.held_bytes == 128
    scratch.tensors(((100,), torch.float64))  # 800 bytes: grows
    assert scratch.held_bytes == 832
    (big,) = scratch.tensors(((200,), torch.float64))  # 1600 bytes: over the cap
    assert big.numel() == 200 and scratch.held_bytes == 832  # fresh, buffer kept
    assert big.untyped_storage().nbytes() == 1600


def test_other_devices_get_fresh_tensors():
    scratch = Scratch(torch.device("meta"))
    (x,) = scratch.tensors(((4, 4), torch.float32))
    assert x.device.type == "meta" and scratch.held_bytes == 0
