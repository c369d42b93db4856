"""Speculative decoding, self-drafted (LayerSkip, Elhoushi et al. 2024): the draft is the model itself
exited after its first k decoder layers (then its final norm and LM head, as the logit lens reads the
residual stream); it guesses g tokens one at a time, and the full model verifies all g in one forward
pass. The result of running it (`explorer.runner.lab.speculative`), its lines for the CLI, its lesson
text, and the sampling rule that keeps the output distribution the full model's (`speculative_sample`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.figures.theme import si_text
from explorer.lab.prefix import shape_text


def residual_distribution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(0, p - q)): where to sample after a rejected guess (Leviathan et al. 2023, Algorithm 1;
    Chen et al. 2023, eq. 1).

    Args:
        p: [V] float64, the full (target) model's next-token probabilities, summing to 1.
        q: [V] float64, the draft's, summing to 1.

    Returns:
        [V] float64 summing to 1; p itself where p <= q everywhere (p == q: a guess is never rejected).
    """
    residual = np.maximum(p - q, 0.0)
    total = residual.sum()
    return residual / total if total > 0 else p


def speculative_sample(p: np.ndarray, q: np.ndarray, guess: int, rng: np.random.Generator) -> tuple[bool, int]:
    """The rejection rule of speculative sampling for one position: keep the draft's `guess` (drawn
    from q) with probability min(1, p(guess) / q(guess)), else draw from norm(max(0, p - q)). The token
    it returns is distributed exactly as p, whatever q (Leviathan et al. 2023, Theorem 3.5).

    Args:
        p: [V] float64, the full model's probabilities at this position (all V tokens).
        q: [V] float64, the draft's probabilities there; q[guess] > 0, since the guess was drawn from q.
        guess: the draft's token id.
        rng: the random source (one uniform draw, plus one categorical draw on rejection).

    Returns:
        (accepted, token): whether the guess was kept, and the token emitted (the guess, or the redraw).
    """
    if rng.random() < min(1.0, p[guess] / q[guess]):
        return True, guess
    return False, int(rng.choice(len(p), p=residual_distribution(p, q)))


@dataclass(frozen=True)
class Round:
    """One round: the draft guesses, the full model verifies them in one pass.

    Attributes:
        guesses: the draft's g tokens, greedy, one draft pass each (measured).
        accepted: j, how many leading guesses equal the full model's own greedy tokens (measured).
        full_token: the full model's token after the accepted ones: its correction of guess j + 1, or
            a bonus token when all g were accepted (measured).
        verify_input_shape: [1, T, d], the verify pass's embedding output, T = g + 1: the last token
            not yet in the cache, then the g guesses (measured by a hook).
        context: n, positions in the full model's KV cache after the verify pass's write (measured),
            before it is cropped back to the accepted tokens.
        verify_bytes: bytes the verify pass moves: weights once, its T rows, the KV cache (estimated).
        decode_bytes: bytes one plain decode step at context n moves (estimated).
        draft_bytes: bytes the g draft passes move: k layers and the LM head each (estimated).
        guess_pieces: each guess's text; full_piece: the full model's token's text.
    """

    guesses: tuple[int, ...]
    accepted: int
    full_token: int
    guess_pieces: tuple[str, ...]
    full_piece: str
    verify_input_shape: tuple[int, ...]
    context: int
    verify_bytes: float
    decode_bytes: float
    draft_bytes: float

    @property
    def emitted(self) -> tuple[int, ...]:
        """The tokens this round adds: the accepted guesses, then the full model's own token."""
        return (*self.guesses[:self.accepted], self.full_token)


@dataclass(frozen=True)
class SpeculativeResult:
    """Greedy decoding two ways after one prefill: plain (one full pass per token) and speculative.

    Attributes:
        prompt_tokens: T, the prompt's tokens.
        layers: L, the model's decoder layers.
        depth: k, the draft's layers (1..L-1).
        guesses: g, the draft's guesses per round (the last round guesses no more than it needs).
        rounds: each round's guesses, verdicts, shapes and bytes.
        tokens: the speculative decoding's tokens (measured): the prefill's greedy token, then each
            round's, cut to the number asked for (the last round may add more).
        plain_tokens: plain greedy decoding's tokens (measured).
        speculative_ms, plain_ms: each way's wall time for all its tokens after the prefill, median of
            `repeats` runs (measured).
        repeats: runs timed per way.
        pieces: each token's text: the prompt's, then the plain way's, then the speculative way's.
        device, dtype: where and how it ran; `dtype` is also the format the bytes are estimated in.
    """

    prompt_tokens: int
    layers: int
    depth: int
    guesses: int
    rounds: tuple[Round, ...]
    tokens: tuple[int, ...]
    plain_tokens: tuple[int, ...]
    speculative_ms: float
    plain_ms: float
    repeats: int
    pieces: tuple[str, ...]
    device: str
    dtype: str

    @property
    def same_tokens(self) -> bool:
        return self.tokens == self.plain_tokens

    @property
    def acceptance_rate(self) -> float:
        """Per guess: accepted guesses over all guesses the draft made (computed from the measured
        verdicts); 0 where no round ran."""
        return sum(r.accepted for r in self.rounds) / max(1, sum(len(r.guesses) for r in self.rounds))

    @property
    def first_guess_rate(self) -> float:
        """Per round: the share of rounds whose first guess was accepted (computed); 0 without rounds."""
        return sum(r.accepted > 0 for r in self.rounds) / max(1, len(self.rounds))

    @property
    def accepted_per_round(self) -> float:
        """Per round: the mean number of guesses accepted (computed); 0 without rounds."""
        return sum(r.accepted for r in self.rounds) / max(1, len(self.rounds))

    def acceptance_text(self) -> str:
        """The acceptance with its definitions: per guess, and per round."""
        guesses = sum(len(r.guesses) for r in self.rounds)
        return (f"acceptance {self.acceptance_rate:.0%} per guess ({sum(r.accepted for r in self.rounds)} of the "
                f"{guesses} guesses accepted); per round, the first guess accepted in {self.first_guess_rate:.0%} "
                f"of the {len(self.rounds)} rounds, {self.accepted_per_round:.2f} guesses accepted a round")

    @property
    def speed_up(self) -> float:
        """Plain time per token over speculative time per token (measured): above 1, speculative is faster."""
        return self.plain_ms / max(self.speculative_ms, 1e-9)

    def speed_text(self) -> str:
        """The measured ratio said the way it went: "1.6x the speed" when faster, "4.1x the time per
        token" (slower) when slower."""
        if self.speed_up >= 1:
            return f"{self.speed_up:.2f}x the speed (faster)"
        return f"{1 / self.speed_up:.2f}x the time per token (slower)"

    def ms_per_token(self, speculative: bool) -> float:
        return (self.speculative_ms if speculative else self.plain_ms) / len(self.tokens)

    def bytes_per_token(self, speculative: bool) -> float:
        """Estimated bytes moved per token after the prefill's: plain, one decode step each;
        speculative, each round's draft passes and verify pass over the tokens it added; 0 where no
        round ran (one token asked for, or the prefill's was end-of-sequence)."""
        added = sum(len(r.emitted) for r in self.rounds)
        if not added:
            return 0.0
        if speculative:
            return sum(r.draft_bytes + r.verify_bytes for r in self.rounds) / added
        return sum(r.decode_bytes * len(r.emitted) for r in self.rounds) / added

    def text(self, speculative: bool) -> str:
        start = self.prompt_tokens + (len(self.tokens) if speculative else 0)
        return "".join(self.pieces[start:start + len(self.tokens)])

    def lines(self) -> list[str]:
        """The CLI's table: one line per round, then the totals."""
        lines = [f"prompt {self.prompt_tokens} tokens; draft = the first {self.depth} of {self.layers} layers "
                 f"+ final norm + LM head; {self.guesses} guesses a round ({self.device}, {self.dtype})",
                 f"{'round':>5} {'guesses (measured; accepted in [ ])':<44} {'full':<10} {'verify input':<14} "
                 f"{'n':>5} {'verify / decode bytes (estimated)':>34}"]
        for index, r in enumerate(self.rounds, 1):
            shown = " ".join(f"[{piece!r}]" if i < r.accepted else repr(piece) for i, piece in enumerate(r.guess_pieces))
            lines.append(f"{index:>5} {shown[:44]:<44} {r.full_piece!r:<10} {shape_text(r.verify_input_shape):<14} "
                         f"{r.context:>5} {si_text(r.verify_bytes, 'B') + ' / ' + si_text(r.decode_bytes, 'B'):>34}")
        if not self.rounds:
            return [*lines, f"{len(self.tokens)} token, the prefill's: no round to speculate (ask for 2 or more "
                            f"tokens); tokens {'identical to' if self.same_tokens else 'DIFFER from'} plain greedy "
                            f"decoding: {self.text(False)!r}"]
        lines += [
            f"{self.acceptance_text()} (measured); {len(self.tokens)} tokens in {len(self.rounds)} "
            f"verify passes instead of {len(self.tokens) - 1} decode steps after the prefill's",
            f"time per token {self.ms_per_token(True):.1f} ms against {self.ms_per_token(False):.1f} ms plain "
            f"(measured, median of {self.repeats}): {self.speed_text()}; bytes per token "
            f"{si_text(self.bytes_per_token(True), 'B')} against {si_text(self.bytes_per_token(False), 'B')} "
            f"(estimated, {self.dtype})",
            f"tokens {'identical to' if self.same_tokens else 'DIFFER from'} plain greedy decoding: "
            f"{self.text(False)!r}",
        ]
        return lines


def lesson_text(result: SpeculativeResult) -> str:
    """The lesson page: what the draft guessed, what the verify pass cost and what it saved."""
    r = result
    if not r.rounds:
        return (f"**Speculative decoding, self-drafted.** Only {len(r.tokens)} token was decoded, the prefill's "
                "own, so no round of guesses ran: ask for 2 tokens or more to see the draft guess and the full "
                "model verify.")
    first = r.rounds[0]
    verify_ratio = first.verify_bytes / first.decode_bytes
    return (
        f"**Speculative decoding, self-drafted.** The draft is this model cut short: its first **{r.depth}** of "
        f"{r.layers} layers, then its own final norm and LM head (the logit lens at layer {r.depth}). It guesses "
        f"up to **{r.guesses}** tokens one at a time; then the full model runs all of them in one pass (input "
        f"{shape_text(first.verify_input_shape)}, measured: the last token not yet cached plus the guesses) and "
        f"keeps the guesses that equal its own greedy choice, up to the first that does not, which it replaces "
        f"with its own token. Measured: {r.acceptance_text()}, so {len(r.tokens)} tokens took "
        f"{len(r.rounds)} verify passes after the prefill's token. Why it can pay: at batch 1 a "
        f"decode step is memory bound, and the verify pass reads the weights once for all its "
        f"{first.verify_input_shape[1]} rows: {si_text(first.verify_bytes, 'B')} against "
        f"{si_text(first.decode_bytes, 'B')} for one decode step ({verify_ratio:.2f}x, estimated in {r.dtype}). "
        f"With the draft's own passes, {si_text(r.bytes_per_token(True), 'B')} per token against "
        f"{si_text(r.bytes_per_token(False), 'B')} (estimated); measured here, "
        f"{r.ms_per_token(True):.1f} ms per token against {r.ms_per_token(False):.1f} ms: "
        f"**{r.speed_text()}**. {_verdict(r)} "
        f"The tokens are **{'identical to' if r.same_tokens else 'DIFFERENT from'}** plain greedy decoding's. "
        "Sampling keeps the full model's distribution too: keep a guess x with probability min(1, p(x)/q(x)), "
        "else draw from norm(max(0, p − q)) (Leviathan et al. 2023; Chen et al. 2023)."
    )


def _verdict(result: SpeculativeResult) -> str:
    """Whether it paid here, and why not where it did not."""
    if result.speed_up >= 1:
        return "Here it paid: the accepted guesses saved more full passes than the draft's passes cost."
    return ("Here it did not pay: a model not trained to exit early (LayerSkip trains with layer dropout and "
            "an early-exit loss) guesses poorly from its middle layers, so most rounds add one or two tokens "
            "for g draft passes and a verify pass; a deeper draft guesses better but costs more.")
