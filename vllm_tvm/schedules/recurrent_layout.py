"""How the recurrent-layer kernels (gated_delta_rule.py, causal_conv1d.py) map onto a target.

Why apart: the delta-rule scan, its one-step form and the causal conv share one loop shape,
written once for both targets: a task per (sequence, head) or (sequence, channel block) and,
inside a task, "threads" that each own a slice of columns. On GPUs a task is a thread block
and each thread owns one column (`columns_per_thread == 1`, so its slice lives in
registers); on CPUs tasks run on the worker pool (`T.parallel`) with one "thread" owning
every column, its column loop innermost so LLVM vectorises it. Scratch shared by the
threads of a task is `shared` memory on GPUs and a per-task buffer on CPUs.
"""

from __future__ import annotations

from typing import Any

from tvm.script import tirx as T


class ColumnLayout:
    """Tasks, threads and per-thread columns for `columns` columns a task."""

    def __init__(self, columns: int, gpu: bool, gpu_threads: int | None = None) -> None:
        """`gpu_threads`: threads a GPU task (default: one per column, at most 1,024)."""
        self.gpu = gpu
        self.threads = min(gpu_threads or columns, columns, 1024) if gpu else 1
        self.columns_per_thread = -(-columns // self.threads)
        self.shared_scope = "shared" if gpu else "global"

    def task_loop(self, tasks: Any) -> Any:
        return T.thread_binding(tasks, thread="blockIdx.x") if self.gpu else T.parallel(tasks)

    def thread_loop(self) -> Any:
        return T.thread_binding(self.threads, thread="threadIdx.x") if self.gpu else T.serial(1)

    def column_loop(self) -> Any:
        """A thread's own columns: innermost, vectorised on CPUs, one column on GPUs."""
        if self.gpu or self.columns_per_thread == 1:
            return T.vectorized(self.columns_per_thread)
        return T.vectorized(self.columns_per_thread)

    def column(self, thread: Any, own: Any) -> Any:
        """The column index of a thread's `own`-th column."""
        return thread * self.columns_per_thread + own
