"""A small DRUP/DRAT proof checker (standard library only): "this CNF is unsatisfiable".

Input: a DIMACS CNF (strict: one ``p cnf V C`` header, exactly ``C`` clauses, literals in
``[-V, V]``, every clause ended by ``0``) and a textual DRAT/DRUP proof: one step per line,
``l1 ... lk 0`` (add a lemma) or ``d l1 ... lk 0`` (delete a clause), ``c`` comments.

Checking is backward, as in drat-trim.  A forward pass applies the additions and
deletions with unit propagation at the top level only, until some clause is falsified
there (the empty clause follows).  The clauses that conflict rests on are marked (the
conflict clause and, transitively, the clause that implied each of its literals).  Then
the steps are undone from the last to the first, and every *marked* lemma is checked
against the clauses present when it was added: RUP (assigning its negation and unit
propagating gives a conflict), failing that RAT on its first literal ``p`` (every
resolvent with a live clause containing ``-p`` is RUP; those clauses are marked too).  The
clauses each check used are marked in turn.  So every marked lemma follows from marked
clauses before it (or, RAT, keeps them satisfiable), and the final conflict uses marked
clauses only: the marked lemmas alone are a checked refutation.  Unmarked lemmas play no
part and are not checked (a proof with a wrong lemma nobody uses is still a proof).
Deleting a clause that is absent, a unit clause, or a clause satisfied at the top level is
ignored (drat-trim ignores unit and reason deletions too): solvers drop such clauses while
still using the units they imply.  Ignoring a deletion is always sound: every check is
made against our own clause set, which only has more clauses.  Propagation uses two
watched literals per clause and a literal-indexed value array.

Verdicts: ``s VERIFIED`` (exit 0), ``s REJECTED`` (exit 1: a lemma fails, or no empty
clause), ``s UNUSABLE`` (exit 2: malformed input or a resource limit; never a crash).
"""

from __future__ import annotations

from ..verdict import CheckReport, Rejected, Unusable, failure
from .dimacs import MAX_STEPS, MAX_VARS, ints, parse_cnf, read_text


class _Checker:
    """Clauses with two watched literals, a top-level assignment (the literals unit
    propagation implies) with the clause that implied each literal, and core marks.
    Deletions of clauses satisfied at the top level are ignored, so the reason of every
    top-level literal stays in the clause set."""

    def __init__(self, nvars: int, max_steps: int) -> None:
        self.nvars = nvars
        self.val = [0] * (2 * nvars + 1)  # val[lit]: 1, -1 or 0 (val[-x] sits at the end)
        self.reason = [-1] * (nvars + 1)  # clause that implied the variable; -1: assumed
        self.pos = [0] * (nvars + 1)  # the variable's place on the trail
        self.done = bytearray(nvars + 1)  # top-level variable whose antecedents are marked
        self.top = 0  # trail length of the top level during a check
        self.trail: list[int] = []  # true literals; the top level, then a check's own
        self.clauses: list[list[int]] = []
        self.alive = bytearray()
        self.core = bytearray()  # clauses the refutation depends on (marked backward)
        self.watch: dict[int, list[int]] = {}
        self.index: dict[tuple[int, ...], list[int]] = {}
        self.conflict = -1  # a clause falsified at the top level, once there is one
        self.steps, self.max_steps = 0, max_steps

    def grow(self, lits: list[int]) -> None:
        top = max((abs(x) for x in lits), default=0)
        if top > MAX_VARS:
            raise Unusable(f"variable {top} beyond the limit {MAX_VARS}")
        if top > self.nvars:
            val = [0] * (2 * top + 1)
            for x in range(1, self.nvars + 1):
                val[x], val[-x] = self.val[x], self.val[-x]
            self.val = val
            self.reason.extend([-1] * (top - self.nvars))
            self.pos.extend([0] * (top - self.nvars))
            self.done.extend(bytes(top - self.nvars))
            self.nvars = top

    def _value(self, lit: int) -> int:
        return self.val[lit]

    def _assign(self, lit: int, why: int) -> None:
        self.val[lit], self.val[-lit] = 1, -1
        self.reason[abs(lit)] = why
        self.pos[abs(lit)] = len(self.trail)
        self.trail.append(lit)

    def _attach(self, ci: int) -> None:
        """Watch the two best literals (true, open, false) of clause ``ci``; a unit
        clause is propagated at the top level."""
        c = self.clauses[ci]
        c.sort(key=lambda x: -self._value(x))
        self.alive[ci] = 1
        if not c or self._value(c[0]) < 0:
            self.conflict = ci
            return
        if len(c) > 1:
            self.watch.setdefault(c[0], []).append(ci)
            self.watch.setdefault(c[1], []).append(ci)
        if self._value(c[0]) == 0 and (len(c) == 1 or self._value(c[1]) < 0):
            start = len(self.trail)
            self._assign(c[0], ci)
            self.conflict = self._propagate(start)

    def add(self, lits: list[int]) -> int:
        ci = len(self.clauses)
        self.clauses.append(list(dict.fromkeys(lits)))
        self.alive.append(0)
        self.core.append(0)
        self.index.setdefault(tuple(sorted(self.clauses[ci])), []).append(ci)
        self._attach(ci)
        return ci

    def delete(self, lits: list[int]) -> int:
        """Delete a clause, unless it is absent, a unit, or satisfied at the top level
        (solvers drop those while still using the units they imply); its index or -1."""
        hits = self.index.get(tuple(sorted(set(lits))))
        if not hits or len(set(lits)) <= 1 or any(self._value(x) > 0 for x in lits):
            return -1
        ci = hits.pop()
        self.alive[ci] = 0  # watch lists drop it lazily
        return ci

    def undelete(self, ci: int) -> None:
        self.index[tuple(sorted(self.clauses[ci]))].append(ci)
        self._attach(ci)

    def unadd(self, ci: int, trail_len: int) -> None:
        """Undo the addition of clause ``ci`` (the top level shrinks back to ``trail_len``)."""
        self.alive[ci] = 0
        self.index[tuple(sorted(self.clauses[ci]))].remove(ci)
        for lit in self.trail[trail_len:]:
            self.val[lit] = self.val[-lit] = 0
            self.done[abs(lit)] = 0
        del self.trail[trail_len:]
        self.conflict = -1

    def mark(self, ci: int, lits: list[int]) -> None:
        """Mark clause ``ci`` (if >= 0) and every clause that implied a variable of
        ``lits``, transitively: the clauses a conflict was derived from.  A top-level
        variable's antecedents are marked once (``done``) until it is unassigned."""
        if ci >= 0:
            self.core[ci] = 1
        stack, seen = [abs(x) for x in lits], set()
        reason, pos, done, top = self.reason, self.pos, self.done, self.top
        while stack:
            v = stack.pop()
            if v in seen or (done[v] and pos[v] < top):
                continue
            seen.add(v)
            r = reason[v]
            if r >= 0 and self.val[v]:  # assigned; its reason then is current
                self.core[r] = 1
                stack.extend(abs(x) for x in self.clauses[r])
            if pos[v] < top:
                done[v] = 1

    def rup(self, lemma: list[int]) -> bool:
        """Does unit propagation from the negation of ``lemma`` reach a conflict?  If so,
        the clauses it used are marked."""
        mark = self.top = len(self.trail)
        try:
            for lit in lemma:
                v = self._value(lit)
                if v > 0:  # already implied (or a tautology)
                    self.mark(-1, [lit])
                    return True
                if v == 0:
                    self._assign(-lit, -1)
            ci = self._propagate(mark)
            if ci >= 0:
                self.mark(ci, self.clauses[ci])
            return ci >= 0
        finally:
            for lit in self.trail[mark:]:
                self.val[lit] = self.val[-lit] = 0
            del self.trail[mark:]

    def _propagate(self, start: int) -> int:
        """Unit propagation from ``trail[start:]``; a falsified clause's index or -1."""
        val, clauses, alive, watch, trail = (self.val, self.clauses, self.alive, self.watch,
                                             self.trail)
        reason, pos = self.reason, self.pos
        i = start
        while i < len(trail):
            false = -trail[i]
            i += 1
            wl = watch.get(false)
            if not wl:
                continue
            self.steps += len(wl)
            if self.steps > self.max_steps:
                raise Unusable(f"resource limit: more than {self.max_steps} propagation steps")
            keep = 0
            j = 0
            while j < len(wl):
                ci = wl[j]
                j += 1
                c = clauses[ci]
                if c[0] == false:
                    c[0], c[1] = c[1], c[0]
                if not alive[ci] or c[1] != false:  # deleted, or a stale watch
                    continue
                first = c[0]
                fv = val[first]
                if fv > 0:
                    wl[keep] = ci
                    keep += 1
                    continue
                for m in range(2, len(c)):
                    x = c[m]
                    if val[x] >= 0:
                        c[1], c[m] = x, false
                        watch.setdefault(x, []).append(ci)
                        break
                else:
                    wl[keep] = ci
                    keep += 1
                    if fv < 0:  # conflict
                        while j < len(wl):
                            wl[keep] = wl[j]
                            keep += 1
                            j += 1
                        del wl[keep:]
                        return ci
                    val[first], val[-first] = 1, -1
                    v = first if first > 0 else -first
                    reason[v], pos[v] = ci, len(trail)
                    trail.append(first)
            del wl[keep:]
        return -1

    def rat(self, lemma: list[int]) -> bool:
        """RAT on the first literal p: every resolvent with a live clause containing -p
        is RUP; those clauses are marked (they belong to the argument)."""
        if not lemma:
            return False
        pivot = lemma[0]
        for ci, c in enumerate(self.clauses):
            if not self.alive[ci] or -pivot not in c:
                continue
            self.core[ci] = 1
            if not self.rup(lemma + [x for x in c if x != -pivot]):
                return False
        return True


def check_proof(cnf_text: str, proof_text: str, max_steps: int = MAX_STEPS) -> CheckReport:
    """Check that ``proof_text`` refutes ``cnf_text``; never raises on bad input.

    Backward checking (as drat-trim does): a forward pass adds and deletes the clauses,
    propagating at the top level only, until a clause is falsified there; the clauses that
    conflict depends on are marked; then, undoing the steps from the last to the first,
    every *marked* lemma is checked (RUP, else RAT) against the clauses present when it
    was added, and the clauses its check used are marked in turn.  Unmarked lemmas play no
    part in the refutation: the marked lemmas alone form a checked proof."""
    try:
        nvars, clauses = parse_cnf(cnf_text)
        ck = _Checker(nvars, max_steps)
        for c in clauses:
            if ck.conflict < 0:
                ck.add(c)
        steps: list[tuple[int, int, int]] = []  # (proof line, clause, trail length or -1)
        lemmas = deletions = 0
        for k, line in enumerate(proof_text.splitlines(), 1):
            s = line.strip()
            if not s or s[0] == "c":
                continue
            delete = s[0] == "d"
            lits = ints(s[1:] if delete else s, f"proof line {k}")
            if not lits or lits[-1] != 0 or 0 in lits[:-1]:
                raise Unusable(f"proof line {k}: a step is literals ended by one 0")
            if ck.conflict >= 0:
                continue  # the refutation is complete; later lines are only read
            lits = lits[:-1]
            ck.grow(lits)
            if delete:
                ci = ck.delete(lits)
                if ci >= 0:
                    deletions += 1
                    steps.append((k, ci, -1))
                continue
            lemmas += 1
            trail_len = len(ck.trail)
            steps.append((k, ck.add(lits), trail_len))
        if ck.conflict < 0:
            raise Rejected("the proof does not derive the empty clause")
        ck.top = len(ck.trail)
        ck.mark(ck.conflict, ck.clauses[ck.conflict])
        checked = 0
        for k, ci, trail_len in reversed(steps):
            if trail_len < 0:
                ck.undelete(ci)
                continue
            ck.unadd(ci, trail_len)
            if not ck.core[ci]:
                continue
            checked += 1
            lits = ck.clauses[ci]
            if not (ck.rup(lits) or ck.rat(lits)):
                raise Rejected(f"proof line {k}: lemma {' '.join(map(str, lits[:12]))}"
                                f"{' ...' if len(lits) > 12 else ''} 0 is neither RUP nor RAT")
        return CheckReport(counts={"lemmas": lemmas, "deletions": deletions, "checked": checked})
    except (Rejected, Unusable, MemoryError, RecursionError) as exc:
        return failure(exc)


def check_proof_files(cnf_path: str, proof_path: str, max_steps: int = MAX_STEPS
                      ) -> CheckReport:
    try:
        cnf, proof = read_text(cnf_path), read_text(proof_path)
    except (OSError, Unusable) as exc:
        return CheckReport([str(exc)], unusable=True)
    return check_proof(cnf, proof, max_steps)
