"""Checkpoints as one directory per cut: every rank writes its own part, a manifest commits them.

Layout of ``ckpt-NNNNNN/`` (NNNNNN: the checkpoint's sequence number):
  server-K.h5        server rank K's key range: datasets params, initial (and unapplied, what a
                     scaling policy held back), attrs keys [start, stop]; server 0's also holds the
                     book: attrs server (JSON: version, counters, policy and budget state) and
                     group /book (per-worker clocks and counters)
  worker-WWWWW.h5    worker W's resumable state: attrs state (JSON: cursor, RNG, schedule,
                     counters), datasets unsent (local work not yet pushed), produced, order,
                     and on CSR rows with L2 lazy_stamps (kernels.lazy; the product in state)
  manifest.json      written last by rank 0: format, schema, run shape (ranks, servers, key
                     ranges, sync, model, n_params), config, progress, and every part's name,
                     size and sha256
Each rank writes its part in parallel (serial h5py, plain contiguous datasets; a mostly-zero
vector such as the unsent work of a sparse model as its nonzero keys and values) to a temporary
name, fsyncs it and renames it; rank 0 gathers the parts' (name, size, sha256), writes the
manifest to a temporary name, fsyncs it, renames it and fsyncs the directory. A directory
without a manifest is an interrupted write and is never loaded; a part whose size or sha256
differs from the manifest's is refused, naming the file. A worker that has left keeps its last
part: later checkpoints hard-link it (copy where links fail) instead of writing it again.
"""
from .control import CheckpointControl, parse_every
from .coordinator import CheckpointCoordinator, CheckpointIO, Cut, CutState, PeerParts, ServerPart
from .layout import (FORMAT, MANIFEST, SCHEMA, SPARSE_AT, Checkpoint, checkpoint_dir, checkpoint_paths,
                     clean_temporaries, next_seq, sha256_of)
from .read import load, load_latest, worker_state
from .restart import check_compatible, reshape
from .write import (HOLD_ENV, HOLD_S, FileParts, commit, hold_s, run_fields, save, write_part,
                    write_server_part, write_worker_part)



__all__ = ["FORMAT", "MANIFEST", "SCHEMA", "SPARSE_AT", "HOLD_ENV", "HOLD_S", "Checkpoint", "CheckpointControl",
           "CheckpointCoordinator", "CheckpointIO", "Cut", "CutState", "FileParts", "PeerParts", "ServerPart",
           "check_compatible", "checkpoint_dir", "checkpoint_paths", "clean_temporaries", "commit", "hold_s",
           "load", "load_latest", "next_seq", "parse_every", "reshape", "run_fields", "save",
           "sha256_of", "worker_state", "write_part", "write_server_part", "write_worker_part"]
