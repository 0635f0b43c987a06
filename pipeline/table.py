"""Part 4's table: training every run of it, choosing each direction's final system
on `val`, and scoring every row on test_2016.

The notebook's main path calls four functions, in this order:

* `recipe_runs`: the table's training runs, folder -> (config, data): the full
  recipe's model, its post-norm twin(s), English->German, and for each direction the
  full recipe with **eq. 3 alone**, a branch that continues the run with the paper's
  schedule over its last `RecipeConfig.eq3_branch` of steps, instead of the cool-down;
* `train_recipe`: trains (or loads) each run into its folder; an eq. 3 branch starts
  from its direction's run where the branch begins (`atkit.resume.share_steps`): up
  to there both rates are eq. 3's. A run whose loss turns infinite or NaN is kept as
  `Trained(..., diverged=...)`, and every row that decodes it says so;
* `final_systems`: per direction, the weights and the search of the final system, all
  chosen on `val`: how many snapshots to average, for the cool-down run and for its
  eq. 3 branch (greedy BLEU); the length penalty alpha of beam search over each
  average; then the better of the two with beam search (`choose_weights`);
* `score_table`: every row decoded on test_2016, once, as the plain record that
  `atkit.report` turns into the table and its sentences: each row with its gain over
  the row it is compared with and that gain's 95 % interval (sacreBLEU's paired
  bootstrap), and the seeds' scores beside the rows the seed spread measured.

Val chooses, test reports: nothing that chooses (the snapshots and their average,
alpha, the final system) decodes or reads test_2016 (tests/test_recipe.py holds
them to it); test_2016 is decoded only by `score_table` and `averaging_analysis`,
after every choice is made.

The notebook's functions are the book's, imported by name: `pipeline.train` and the
snapshots it keeps, the book's `bleu`, `greedy_decode`, `make_search` and `rate`.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path

import annotated_transformer_lib as book
from atkit import config, fast, resume, schedule, scoring, seeds
from atkit.resume import NonFiniteLossError
from atkit.settings import ConfigError
from pipeline.run import averaged_model, best_model, train


@dataclass
class Trained:
    """A training run of the table: its config, data and history, or where it
    diverged."""

    cfg: object
    data: object
    history: dict | None = None
    diverged: str | None = None


DIRECTIONS = {"de-en": "part4-bpe-all", "en-de": "part4-bpe-all-en-de"}


def eq3(name: str) -> str:
    """The folder of a run's eq. 3 branch."""
    return f"{name}-eq3"


def branch_step(cfg, recipe) -> int:
    """The step where a run's eq. 3 branch begins: the last `recipe.eq3_branch` of
    its steps. Up to there the run's own rate must be eq. 3's, so the branch may not
    be shorter than the cool-down."""
    step = math.floor(round(cfg.steps * (1 - recipe.eq3_branch), 6))
    if step > schedule.cooldown_start(cfg):
        raise ConfigError(
            f"RecipeConfig.eq3_branch={recipe.eq3_branch} is shorter than the "
            f"cool-down (RunConfig.cooldown={cfg.cooldown}): the branch must begin "
            "where both rates are still eq. 3's; give eq3_branch >= cooldown"
        )
    return step


def recipe_runs(bpe_cfg, bpe_data, en_de_cfg, en_de, recipe) -> dict:
    """The table's training runs: folder -> (config, data)."""
    runs = {
        "part4-bpe-all": (bpe_cfg, bpe_data),
        eq3("part4-bpe-all"): (bpe_cfg.updated(cooldown=0.0), bpe_data),
        "part4-bpe-all-post-same": (bpe_cfg.updated(norm="post"), bpe_data),
    }
    if recipe.post_schedule:
        own = dict(
            factor=bpe_cfg.factor * recipe.post_factor, warmup=recipe.post_warmup
        )
        runs["part4-bpe-all-post"] = (bpe_cfg.updated(norm="post", **own), bpe_data)
    runs["part4-bpe-all-en-de"] = (en_de_cfg, en_de)
    runs[eq3("part4-bpe-all-en-de")] = (en_de_cfg.updated(cooldown=0.0), en_de)
    return runs


def train_or_report(cfg, data, ckpt_dir, device, log=print) -> Trained:
    """train(), with a run that diverges reported instead of raised."""
    try:
        return Trained(cfg, data, train(cfg, data, ckpt_dir, device, log=log)[1])
    except NonFiniteLossError as err:
        log(f"diverged: {err}")
        where = f"loss not finite at step {err.step}" if err.step else str(err)
        return Trained(cfg, data, diverged=where)


def train_recipe(runs: dict, root: Path, device, recipe, part3=None, log=print):
    """Train or load every run; an eq. 3 branch starts from its run's saved state
    where the branch begins. Returns folder -> Trained, Part 3's run first where
    `part3` gives it (config, data, history) as the table's row 1."""
    out = {} if part3 is None else {"part3": Trained(*part3)}
    for name, (c, d) in runs.items():
        log(f"{name}:")
        branch = runs.get(eq3(name))
        if branch is not None:
            at = branch_step(c, recipe)

            def up_to(n, c=c, d=d, folder=root / name):
                return train(c, d, folder, device, max_steps=n, log=log)

            with contextlib.suppress(NonFiniteLossError):  # the run says so below
                branched = resume.share_steps(
                    up_to,
                    root / name,
                    root / eq3(name),
                    branch[0],
                    at,
                    may_differ={"cooldown"},
                    log=log,
                )
                if branched:  # the run goes on past the branch: its own label
                    log(f"{name}, after step {at}:")
        out[name] = train_or_report(c, d, root / name, device, log)
    return out


def choose_n_avg(ckpt_dir, trained: Trained, n_max, device):
    """(n, sweep of (n, steps, val BLEU, ratio)): how many snapshots that end at the
    best one to average, on val with greedy decoding."""
    h = trained.history
    n_max = min(n_max, h["steps"].index(h["best_step"]) + 1)
    sweep = []
    for n in range(1, n_max + 1):
        m = averaged_model(ckpt_dir, h, device, n)
        r = book.bleu(
            m, trained.data, "val", book.greedy_decode, trained.cfg.decode_tokens
        )
        sweep.append((n, resume.last_snapshots(h, n), r["bleu"], r["ratio"]))
    return max(sweep, key=lambda row: row[2])[0], sweep


def choose_weights(candidates: dict) -> str:
    """The run whose chosen average scores best on val with beam search at its own
    chosen alpha: candidates maps a run's folder to a dict with ``alpha`` and
    ``alpha_sweep``; on a tie the first (the cool-down run) wins."""
    return max(candidates, key=lambda run: beam_bleu(candidates[run]))


def beam_bleu(candidate: dict) -> float:
    a = candidate["alpha"]
    return next(row[1] for row in candidate["alpha_sweep"] if row[0] == a)


def choose_alpha(model, trained: Trained, recipe):
    """(best alpha, sweep of (alpha, val BLEU, ratio), whether the cap stopped it):
    the tried alphas, then larger ones while the best is the largest tried."""
    tried = {}

    def score(a):
        search = book.make_search("beam", beam_size=recipe.beam_size, alpha=a)
        r = book.bleu(model, trained.data, "val", search, trained.cfg.decode_tokens)
        tried[a] = (r["bleu"], r["ratio"])

    for a in recipe.alphas:
        score(a)
    while (best := max(tried, key=lambda a: tried[a][0])) == max(tried):
        if best + recipe.alpha_step > recipe.alpha_cap:
            break
        score(round(best + recipe.alpha_step, 6))
    return best, [(a, *tried[a]) for a in sorted(tried)], best == max(tried)


def final_systems(trained, recipe, root, device) -> dict:
    """Per direction whose run trained: the weights (the cool-down run's or its eq. 3
    branch's, each averaged as well as greedy val BLEU allows) that score best on val
    with beam search at their own best alpha, and that search."""
    finals = {}
    for direction, name in DIRECTIONS.items():
        if trained[name].diverged:
            continue
        candidates = {}
        for run in (name, eq3(name)):
            if run not in trained or trained[run].diverged:
                continue
            t = trained[run]
            n, sweep = choose_n_avg(root / run, t, recipe.n_avg, device)
            weights = averaged_model(root / run, t.history, device, n)
            alpha, alpha_sweep, capped = choose_alpha(weights, t, recipe)
            candidates[run] = dict(
                n_avg=n,
                sweep=sweep,
                weights=weights,
                alpha=alpha,
                alpha_sweep=alpha_sweep,
                capped=capped,
            )
        run = choose_weights(candidates)
        c = candidates[run]
        finals[direction] = dict(
            run=run,
            branch=run != name,
            n_avg=c["n_avg"],
            avg_sweep=c["sweep"],
            candidates={
                r: {k: v for k, v in cand.items() if k != "weights"}
                for r, cand in candidates.items()
            },
            weights=c["weights"],
            alpha=c["alpha"],
            alpha_sweep=c["alpha_sweep"],
            capped=c["capped"],
            alpha_cap=recipe.alpha_cap,
            search=book.make_search(
                "beam", beam_size=recipe.beam_size, alpha=c["alpha"]
            ),
        )
    return finals


PAPER_ALPHA = 0.6  # §6.1: beam 4 and a length penalty of 0.6


def table_rows(recipe, finals) -> list[tuple]:
    """(key, label, direction, training run, weights, the row compared with, what
    differs from that row). Each row differs from the row it is compared with in
    one thing, and says in what: a direction's averaging row is its cool-down run's
    own average (how many snapshots: val); where the final system is the eq. 3
    branch's average, a row of its own compares it with that one; where val chose
    another alpha than the paper's, a row decodes the same weights at the paper's.
    Weights: "best" (the run's best snapshot, greedy), "average" (the cool-down
    run's own average, greedy), "final" (the final system's weights, greedy),
    "paper" (those with beam search at the paper's alpha), "beam" (the final
    system)."""

    def decoding(direction, first):
        """The averaging, branch and beam rows of one direction."""
        name, f = DIRECTIONS[direction], finals.get(direction)
        run = f["run"] if f else name
        key = "" if direction == "de-en" else f"{direction} "
        label = "+ averaging"
        if f:
            n = own_n(f, name)
            label = (
                f"+ average of {n} snapshots" if n > 1 else f"{label} (none beat best)"
            )
        rows = [
            (
                f"{key}avg",
                label,
                direction,
                name,
                "average",
                first,
                "the cool-down run's average (how many: val)",
            )
        ]
        greedy = f"{key}avg"
        if f and f["branch"]:
            rows.append(
                (
                    f"{key}branch",
                    f"+ eq. 3 branch, average of {f['n_avg']}",
                    direction,
                    run,
                    "final",
                    greedy,
                    f"eq. 3 alone, not the cool-down, over the last "
                    f"{recipe.eq3_branch:.0%} (each averaged as val chose)",
                )
            )
            greedy = f"{key}branch"
        beam = f"+ beam {recipe.beam_size}"
        if f and f["alpha"] != PAPER_ALPHA:
            rows.append(
                (
                    f"{key}beam paper",
                    f"{beam}, paper's alpha {PAPER_ALPHA}",
                    direction,
                    run,
                    "paper",
                    greedy,
                    f"beam search, the paper's alpha {PAPER_ALPHA}",
                )
            )
        alpha = f["alpha"] if f else "?"
        rows.append(
            (
                f"{key}beam",
                f"{beam}, alpha {alpha}",
                direction,
                run,
                "beam",
                greedy,
                "beam search, the alpha val chose",
            )
        )
        return rows

    rows = [
        ("words", "words, tie='tgt', greedy", "de-en", "part3", "best", None, ""),
        (
            "bpe",
            "shared BPE + tie='all'",
            "de-en",
            "part4-bpe-all",
            "best",
            "words",
            "shared BPE and tie='all' (one piece: one vocabulary)",
        ),
        *decoding("de-en", "bpe"),
        (
            "post",
            "row 2 with post-norm",
            "de-en",
            "part4-bpe-all-post-same",
            "best",
            "bpe",
            "post-norm instead of pre-norm",
        ),
    ]
    if recipe.post_schedule:
        rows.append(
            (
                "post own",
                "+ post-norm's schedule",
                "de-en",
                "part4-bpe-all-post",
                "best",
                "post",
                "post-norm's own warm-up and peak rate",
            )
        )
    en_de = DIRECTIONS["en-de"]
    rows += [
        ("en-de", "BPE + tie='all', greedy", "en-de", en_de, "best", None, ""),
        *decoding("en-de", "en-de"),
    ]
    return rows


def own_n(final: dict, run: str) -> int:
    """How many snapshots val chose to average for the cool-down run `run`, one of
    the candidates of a direction's final system `final`."""
    candidates = final.get("candidates") or {}
    if run in candidates:
        return candidates[run]["n_avg"]
    return 1 if final["branch"] else final["n_avg"]


def averaged(weights, run, direction, finals) -> int | None:
    """How many snapshots a row's weights average (None: a single snapshot)."""
    if weights == "best":
        return None
    final = finals.get(direction)
    if final is None:
        return None
    return own_n(final, run) if weights == "average" else final["n_avg"]


def row_weights(weights, run, direction, trained, finals, recipe, root, device):
    """(model, search) of a row's weights (see `table_rows`)."""
    t = trained[run]
    if weights == "best":
        return best_model(root / run, t.history, device), book.greedy_decode
    final = finals[direction]
    if weights == "average" and final["branch"]:  # the cool-down run's own average
        n = own_n(final, run)
        return averaged_model(root / run, t.history, device, n), book.greedy_decode
    if weights == "paper":
        size = recipe.beam_size
        return final["weights"], book.make_search(
            "beam", beam_size=size, alpha=PAPER_ALPHA
        )
    return final["weights"], final[
        "search"
    ] if weights == "beam" else book.greedy_decode


def score_table(
    trained, finals, recipe, noise, root, device, preset, spread=None
) -> dict:
    """Every row of the table scored on test_2016: the record atkit.report reads.
    Each row's gain over the row it is compared with gets its 95 % interval by
    sacreBLEU's paired bootstrap over the test sentences (`interval`); `spread`
    (table.seed_noise's summary), where given, puts the seeds' scores beside the
    rows they measured (`seeds`)."""
    rows, runs, outputs = [], {}, {}
    split = "test_2016_flickr"
    for no, (key, label, direction, run, weights, vs, differs) in enumerate(
        table_rows(recipe, finals), start=1
    ):
        t, runs[key] = trained[run], run
        ref = next((r for r in rows if r["key"] == vs), None)
        row = dict(
            no=no,
            key=key,
            label=label,
            dir=direction,
            warmup=t.cfg.warmup,
            peak=schedule.reached_peak(t.cfg, book.rate),
            vs=ref["no"] if ref else None,
            trained=vs is not None and runs[vs] != run,
            change=differs,
            n_avg=averaged(weights, run, direction, finals),
            diverged=t.diverged,
            bleu=None,
            ratio=None,
            unk=None,
            seconds=0.0,
            interval=None,
        )
        if not t.diverged:
            start = time.perf_counter()
            args = (weights, run, direction, trained, finals, recipe, root, device)
            model, search = row_weights(*args)
            r = book.bleu(model, t.data, split, search, t.cfg.decode_tokens)
            row.update(bleu=r["bleu"], ratio=r["ratio"], unk=r["unk"])
            row["seconds"] = time.perf_counter() - start
            if "hyps" in r:
                outputs[key] = (r["hyps"], t.data.text[split][1])
            if ref is not None and vs in outputs and key in outputs:
                row["interval"] = interval(outputs[vs], outputs[key])
        rows.append(row)
    part3 = trained["part3"]
    choices = {
        d: {k: v for k, v in f.items() if k not in ("weights", "search")}
        for d, f in finals.items()
    }
    return dict(
        rows=rows,
        noise=noise,
        steps=part3.cfg.steps,
        preset=preset,
        sentences=len(part3.data.text[split][0]),
        choices=choices,
        seeds=seed_scores(spread),
    )


def interval(base, system) -> dict:
    """The paired bootstrap of one row against its reference row: `low`, `high`,
    `verdict`, `p`, `resamples`, `seed` (atkit.scoring.paired_bootstrap)."""
    (base_hyps, refs), (hyps, own_refs) = base, system
    if list(refs) != list(own_refs):
        raise ValueError(
            "two rows compared on test_2016 have different references: compare rows "
            "of one direction only"
        )
    r = scoring.paired_bootstrap(base_hyps, hyps, refs)
    return {k: r[k] for k in ("low", "high", "verdict", "p", "resamples", "seed")}


# the seed spread's models and the table rows they are
SPREAD_ROWS = {"part3": "words", "full recipe": "bpe"}


def seed_scores(spread) -> dict | None:
    """Row key -> the seeds' test_2016 scores (`seeds`, `values`, `mean`, `min`,
    `max`, `range`) of the model that row is, from table.seed_noise's summary; None
    where it does not apply (not measured, refused, or not given)."""
    if not spread or "models" not in spread:
        return None
    return {
        SPREAD_ROWS[name]: {"seeds": m["seeds"], **m["bleu_test_2016_flickr"]}
        for name, m in spread["models"].items()
        if name in SPREAD_ROWS
    }


def averaging_analysis(trained, finals, recipe, root, device) -> dict | None:
    """Eq. 3 alone and the cool-down, de-en: the best snapshot and the average (n
    chosen on val), greedy, on test and val; None if a run diverged."""
    name = DIRECTIONS["de-en"]
    runs = {"eq. 3 alone": eq3(name), "eq. 3, cool-down": name}
    if "de-en" not in finals or any(
        run not in finals["de-en"]["candidates"] or trained[run].diverged
        for run in runs.values()
    ):
        return None
    out = {"shared": branch_step(trained[name].cfg, recipe)}
    for label, run in runs.items():
        t, tokens = trained[run], trained[run].cfg.decode_tokens
        c = finals["de-en"]["candidates"][run]
        n, val = c["n_avg"], {row[0]: row[2] for row in c["sweep"]}
        test = {
            k: book.bleu(
                averaged_model(root / run, t.history, device, k),
                t.data,
                "test_2016_flickr",
                book.greedy_decode,
                tokens,
            )["bleu"]
            for k in sorted({1, n})
        }
        steps = resume.last_snapshots(t.history, n)
        out[label] = dict(
            n=n,
            one=test[1],
            avg=test[n],
            val_one=val[1],
            val_avg=val[n],
            steps=steps,
            rates=schedule.rates_at(t.cfg, book.rate, steps),
            end_rate=schedule.end_rate(t.cfg, book.rate),
            peak=schedule.reached_peak(t.cfg, book.rate),
        )
    return out


def seed_noise(preset, cfgs: dict, device):
    """The committed seed spread of `cfgs` (name -> RunConfig) and the larger of
    their ranges of test BLEU; ({"why_not": ...}, None) when it does not apply."""
    precision = fast.choose_precision(device, cfgs["full recipe"].precision).name
    configs = {name: c.to_dict() for name, c in cfgs.items()}
    spread, why = seeds.load_spread(preset, configs, config.RunConfig, precision)
    if spread is None:
        return {"why_not": why}, None
    ranges = [m["bleu_test_2016_flickr"]["range"] for m in spread["models"].values()]
    return spread, max(ranges)
