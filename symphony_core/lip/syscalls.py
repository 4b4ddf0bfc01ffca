"""`sym`: the system-call handle a LIP receives as its first argument.

Each LIP thread has its own handle, so every call is attributed to a (process, thread). Every
method calls the runtime (lip/runtime.py) itself, between the kernel's enter and leave steps
(lip/kernel.py), where the call is traced and where a debugger may stop it.

Bad arguments raise a `SymphonyError` subclass whose message names the problem (each method's
*Raises* section gives the class and the message); the LIP may catch it and go on. An uncaught
one ends the process, which its launcher sees as a `LIPError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import PredError, SymphonyError
from ..kvfs import KV
from ..model.dist import Dist
from ..model.sampling import Sampler
from ..sched.process import LIPThread
from ..syscall_surface import no_such_member
from .syscall_host import SyscallHost
from .thread_handle import ThreadHandle


def _kv_args(kv) -> dict:
    if isinstance(kv, KV):
        return {"kv": kv.describe(), "file": kv.file.fid, "kv_len": kv.len}
    return {"kv": repr(kv)}


class Sym:
    """The system calls of one LIP thread: the `sym` its function receives.

    ```text
    def lip(sym, prompt):
        kv = sym.kv_create()
        d = sym.pred(kv, sym.tokenize(prompt))
        return sym.detokenize([d.argmax()])
    ```

    Attributes are read-only facts about the caller and the model: `pid`, `tid`, `user`,
    `eos_token_ids`, `vocab_size`, `page_size`, `tokenizer_file`.
    """

    def __init__(self, rt: SyscallHost, th: LIPThread) -> None:
        self._rt = rt
        self._th = th
        self._k = rt.kernel

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise no_such_member(name)

    # --- identity ------------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        """This process's id."""
        return self._th.proc.pid

    @property
    def tid(self) -> int:
        """This thread's id within the process (the main thread is 1, spawned threads 2, 3, …)."""
        return self._th.tid

    @property
    def user(self) -> str:
        """The user the process runs as: its KV namespace is `/users/<user>/`."""
        return self._th.proc.user

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """The model's end-of-sequence token ids: stop generating when `pred` picks one."""
        return self._rt.tokenizer.eos_token_ids

    @property
    def vocab_size(self) -> int:
        """The number of token ids; a `Dist` has this many logits per position."""
        return self._rt.vocab_size

    @property
    def tokenizer_file(self) -> str:
        """Path of the model's tokenizer.json, read-only: grammar libraries build token masks from it."""
        return self._rt.tokenizer_file

    @property
    def page_size(self) -> int:
        """Tokens per KV page: a file of `n` tokens holds `ceil(n / page_size)` pages."""
        return self._rt.kvfs.pool.page_size

    # --- the model -----------------------------------------------------------------------------
    def pred(
        self, kv: KV, token_ids, positions=None, *, outputs="last", sampler: Sampler | str | None = None, mask=None
    ) -> Dist:
        """Append `token_ids` to the KV file and return the next-token distributions.

        The tokens' keys and values are computed and written into `kv` (one forward pass,
        batched by the scheduler with every other LIP's pending `pred`), and the distribution
        over the next token is returned for the positions `outputs` names. The calling thread
        sleeps until its batch has run. A failed call leaves the file as it was.

        Args:
            kv: a writable handle (`kv_create`, `kv_fork`, or `kv_open(path, "w")`).
            token_ids: the token ids to append: a non-empty list of ints in
                `[0, vocab_size)`, a single int, or an integer tensor.
            positions: the position of each token; default: continuing the file
                (`kv.positions[-1] + 1`, …). Give them to leave gaps or to reuse positions
                (attention sinks, position tricks); each must be below the model's context.
            outputs: which positions get a distribution: `"last"` (default; a one-position
                `Dist`), `"all"` (one per token: index the `Dist`), or a list of indices into
                `token_ids` (negative counts from the end).
            sampler: let the engine pick a token per output position inside the batch: a
                `Sampler`, or `"greedy"`. The pick is in `Dist.token`.
            mask: restrict the next token: a list of allowed ids, or a bool tensor `[vocab]`
                (every output position) or `[n_outputs, vocab]`. Masked logits become `-inf`.

        Returns:
            A `Dist`: `[vocab]` logits for one output position, `[n, vocab]` for several.

        Raises:
            KVError: `kv` is not a usable writable handle:
                `pred expects a KV handle, got <type>`;
                `pred on closed handle to <file>`;
                `pred on read-only handle <path> — fork it first`;
                `pred on <file>: the file was evicted under memory pressure (its hint allowed
                it); its tokens are still in kv.tokens to recompute`.
            PredError: bad arguments, each named:
                `pred on <file>: token_ids is empty`;
                `pred: token_ids must be a list of ints, got a str (tokenize it first)`;
                `pred: token_ids must be ints, got 1.5 (float)` (also booleans, float tensors);
                `pred: token ids [...] are outside the vocabulary [0, <V>)`;
                `pred: <n> positions for <m> tokens`;
                `pred: positions <a>..<b> are past the model's context of <N> tokens`;
                `pred: outputs must be 'last', 'all' or a list of indices, got <x>`;
                `pred: outputs [...] index outside the <n> tokens given`;
                `pred: sampler must be a Sampler or 'greedy', got <x>`;
                `pred: sampler <field> must be …` (a field no batch can use: a non-finite
                temperature, top_k past 2**31 - 1, a seed outside [-2**63, 2**64 - 1], …);
                `pred: mask must be bool [<V>] or [<n>, <V>], got [...]`;
                `pred: mask holds token ids outside the vocabulary`;
                `pred: mask allows no token at some position`.
            LimitExceeded: the process's `Limits` (or the user's quota on a server):
                `process <pid> (<name>): token limit of <N> reached (<used> used, pred asks
                <n> more)`; `process <pid> (<name>): page quota of <N> reached (…)`.
            OutOfPages: the pool cannot hold the call even after evicting hinted files and
                parking other processes: `out of KV pages: pred needs about <n> pages, <f> free
                of <N>, and no other process can give pages back`. (Short of that, the call
                waits for pages rather than failing.)
            Cancelled: the process was cancelled, or a wall-time limit killed it, meanwhile.
        """

        def args() -> dict:
            toks = list(token_ids) if not isinstance(token_ids, int) else [token_ids]
            return {
                **_kv_args(kv),
                "n_tokens": len(toks),
                "tokens": toks[:64],
                "outputs": str(outputs)[:40],
                "sampler": None if sampler is None else repr(sampler),
            }

        enter = self._k.enter(self._th, "pred", args)
        try:
            result = self._rt.pred(self._th, kv, token_ids, positions, outputs, sampler, mask)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, result)

    # --- KV files ------------------------------------------------------------------------------
    def kv_create(self, path: str | None = None) -> KV:
        """Create a KV file and return a writable handle to it.

        Args:
            path: `None` (default) for an anonymous file, which lives while a handle is open. A
                name makes it outlive the process: a relative path is in the caller's directory
                `/users/<user>/`; `/shared/…` is readable by every user, writable by its owner.

        Returns:
            A writable `KV` handle (empty: `kv.len == 0`).

        Raises:
            KVError: a bad path: `KV path <p> is outside /users/<name>/ and /shared/`,
                `KV path of <n> bytes is over the limit of 512 bytes`; `user <u> owns 1024
                named KV files, the limit; …`;
                `KV path <p> names a directory, not a file`, `KV path must be a non-empty string,
                got <x>`; or `KV file <path> already exists (open it, or remove it first)`.
            KVPermissionError: `permission denied: /users/<other>/… is private to user <other>`.
        """
        enter = self._k.enter(self._th, "kv_create", lambda: {"path": path})
        try:
            result = self._rt.kv_create(self._th, path)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, result)

    def kv_open(self, path: str, mode: str = "r") -> KV:
        """Open a named KV file.

        Args:
            path: the file's path (relative paths are in `/users/<user>/`).
            mode: `"r"` (default) read-only — `pred` on it is refused, `kv_fork` it to extend a
                copy; `"w"` (also `"rw"`, `"r+"`) writable, for the owner.

        Returns:
            A `KV` handle sharing the file with every other handle to it.

        Raises:
            KVNotFound: `no KV file at <path>`.
            KVPermissionError: another user's private file, or writing someone else's
                `/shared/` file: `permission denied: <path> belongs to <owner>; others may only read
                it`.
            KVError: `kv_open mode must be 'r' or 'w', got <x>`; a bad path (as in `kv_create`);
                `KV file <path> was evicted under memory pressure (its hint allowed it)`.
        """
        enter = self._k.enter(self._th, "kv_open", lambda: {"path": path, "mode": mode})
        try:
            result = self._rt.kv_open(self._th, path, mode)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, result)

    def kv_fork(self, kv: KV) -> KV:
        """Fork a KV file: a new anonymous file with the same tokens, sharing every page.

        Pages are copied on write, and only the partial last page can ever be written, so a fork costs
        at most one page copy, whatever its length. Forking a read-only handle is allowed (that is how
        a shared prefix is extended).

        Args:
            kv: any open handle.

        Returns:
            A writable handle to the new file (owned by the caller).

        Raises:
            KVError: `kv_fork expects a KV handle, got <type>`; `kv_fork on closed handle to
                <file>`; `kv_fork on <file>: the file was evicted under memory pressure …`.
        """
        enter = self._k.enter(self._th, "kv_fork", lambda: _kv_args(kv))
        try:
            result = self._rt.kv_fork(self._th, kv)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, result)

    def kv_truncate(self, kv: KV, n: int) -> None:
        """Keep the first `n` tokens of the file and give the pages past them back.

        Args:
            kv: a writable handle.
            n: how many tokens to keep, `0 <= n <= kv.len`.

        Raises:
            KVError: `kv_truncate(<file>, <n>): n must be an int in [0, <len>]`; a closed,
                read-only (`kv_truncate on read-only handle <path> — fork it first`) or evicted
                handle, or not a handle.
        """
        enter = self._k.enter(self._th, "kv_truncate", lambda: {**_kv_args(kv), "n": n})
        try:
            self._rt.kv_truncate(kv, n)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, None)

    def kv_close(self, kv: KV) -> None:
        """Close a handle. An anonymous file with no handle left gives its pages back to the pool.

        Handles a process still holds are closed when it ends, so a LIP that raises leaks nothing.

        Raises:
            KVError: `kv_close expects a KV handle, got <type>`; `kv_close: handle to <file> is
                already closed`.
        """
        enter = self._k.enter(self._th, "kv_close", lambda: _kv_args(kv))
        try:
            self._rt.kv_close(self._th, kv)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, None)

    def kv_remove(self, path: str) -> None:
        """Remove a file's name (like `unlink`): open handles keep working on the now-anonymous file,
        whose pages return to the pool when the last one closes.

        Raises:
            KVNotFound: `no KV file at <path>`.
            KVPermissionError: another user's file (only the owner may remove a `/shared/` file).
            KVError: a bad path (as in `kv_create`).
        """
        enter = self._k.enter(self._th, "kv_remove", lambda: {"path": path})
        try:
            self._rt.kv_remove(self.user, path)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, None)

    def kv_hint(self, kv: KV, keep_for: float | None = None, priority: int | None = None) -> None:
        """Say how the file may be reclaimed when pages run short (by default it never is).

        An evicted file keeps its tokens (`kv.tokens`) but loses its K/V: using it raises a `KVError`
        saying so, and the LIP may recompute it into a new file.

        Args:
            kv: a writable handle (a reader of a `/shared/` file may not make it evictable).
            keep_for: keep the file at least this many seconds, then it may be evicted.
            priority: a negative priority makes the file evictable at once; lower goes first.
                With neither argument, the hint is cleared.

        Raises:
            KVError: `kv_hint keep_for must be a number of seconds >= 0, got <x>`; `kv_hint
                priority must be an int, got <x>`; a read-only (`kv_hint on read-only handle …`),
                closed or evicted handle.
        """

        def args() -> dict:
            return {**_kv_args(kv), "keep_for": keep_for, "priority": priority}

        enter = self._k.enter(self._th, "kv_hint", args)
        try:
            self._rt.kvfs.hint(kv, keep_for, priority)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, None)

    def kv_list(self, prefix: str | None = None) -> list[str]:
        """The named files the caller may see: its own directory's, then `/shared/`'s, each
        sorted, at most 1,000 in all (narrow a longer listing with `prefix`).

        Args:
            prefix: keep only paths starting with it (relative prefixes are in the caller's
                directory). A prefix in another user's directory lists nothing.

        Returns:
            Absolute paths, e.g. `["/users/alice/notes.kv", "/shared/sys-1a2b.kv"]`.

        Raises:
            KVError: `kv_list prefix must be a string, got <type>`.
        """
        enter = self._k.enter(self._th, "kv_list", lambda: {"prefix": prefix})
        try:
            result = self._rt.kvfs.listdir(self.user, prefix)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, result)

    # --- text --------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """Token ids of `text` with the model's tokenizer (no special tokens added).

        Raises:
            PredError: `tokenize expects a str, got <type>`.
        """
        enter = self._k.enter(self._th, "tokenize", lambda: {"chars": len(str(text))})
        try:
            result = self._rt.tokenizer.tokenize(text)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, result)

    def detokenize(self, ids) -> str:
        """The text of a list of token ids (special tokens included).

        Raises:
            PredError: `detokenize expects a list of token ids (ints), got <ids>`; `detokenize:
                token ids [<ids>] are outside the vocabulary [0, <vocab_size>)`.
        """
        enter = self._k.enter(self._th, "detokenize", lambda: {"n_tokens": len(ids)})
        try:
            result = self._rt.tokenizer.detokenize(ids)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, result)

    def chat_template(
        self, messages: list[dict], add_generation_prompt: bool = True, *, tools: list[dict] | None = None
    ) -> str:
        """Render a conversation with the model's own chat template (as transformers' `apply_chat_template`).

        Args:
            messages: `[{"role": "system" | "user" | "assistant", "content": str}, …]`.
            add_generation_prompt: end with the assistant's turn header, ready to generate.
            tools: JSON schemas of the functions the model may call, for a template with a tool-calling
                section (Qwen2.5, Qwen3, Llama 3.1+, Mistral); a template without one ignores them.

        Returns:
            The prompt text (tokenize it to feed `pred`).

        Raises:
            PredError: `chat_template expects a list of {'role': ..., 'content': ...} dicts`;
                `this model has no chat template; build the prompt text yourself`; `chat template:
                <message>` when the template itself refuses the conversation.
        """
        enter = self._k.enter(self._th, "chat_template", lambda: {"messages": len(messages)})
        try:
            result = self._render_chat(messages, add_generation_prompt, tools)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, result)

    def _render_chat(self, messages: list[dict], add_generation_prompt: bool, tools: list[dict] | None) -> str:
        try:
            return self._rt.tokenizer.chat_template(messages, add_generation_prompt, tools=tools)
        except SymphonyError:
            raise
        except Exception as e:  # the template's own failure on this conversation (a message without content, …)
            raise PredError(f"chat template: cannot render these messages: {type(e).__name__}: {e}") from None

    # --- the user ----------------------------------------------------------------------------
    def send(self, obj: Any) -> None:
        """Send `obj` to whoever launched the process: `Process.messages()` yields it, in order.

        In-process any object may be sent; a program on a server must send JSON data (a sandboxed
        LIP that sends anything else fails with a `TypeError` naming it). Never blocks.
        """
        enter = self._k.enter(self._th, "send", lambda: {"value": repr(obj)[:200]})
        try:
            self._th.proc.outbox_put(obj)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, None)

    def recv(self, timeout: float | None = None) -> Any:
        """Wait for the next object the launcher sends (`Process.send`, or a client's `send`).

        Args:
            timeout: seconds to wait at most; `None` waits for ever.

        Raises:
            TimeoutError: `recv: no message within <timeout>s`.
            Cancelled: the process was cancelled (or killed by a limit) while waiting.
        """
        enter = self._k.enter(self._th, "recv", lambda: {"timeout": timeout})
        try:
            result = self._rt.recv(self._th, timeout)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return self._k.leave(self._th, enter, result)

    # --- threads -------------------------------------------------------------------------------
    def spawn(self, fn: Callable, *args: Any, **kwargs: Any) -> ThreadHandle:
        """Run `fn(sym, *args, **kwargs)` on a new thread of this process (pthread_create).

        The new thread gets its own `sym`; its `pred` calls are batched with the others', so
        spawning one thread per branch is how a LIP runs branches in one forward pass. A
        thread's exception is re-raised by `join`. When the main thread returns, threads still
        running are cancelled.

        Returns:
            A `ThreadHandle`; `join()` gives the function's return value.

        Raises:
            SymphonyError: `spawn expects a callable, got <type>`.
            LimitExceeded: `process <pid> (<name>): thread limit of <N> reached`
                (`Limits.max_threads`, 64 by default).
        """
        if not callable(fn):
            raise SymphonyError(f"spawn expects a callable, got {type(fn).__name__}")
        enter = self._k.enter(self._th, "spawn", lambda: {"fn": getattr(fn, "__name__", repr(fn))})
        try:
            result = self._rt.start_thread(self._th.proc, fn, args, kwargs)
        except BaseException as e:
            self._k.failed(self._th, enter, e)
            raise
        return ThreadHandle(self._rt, self._th, self._k.leave(self._th, enter, result))
