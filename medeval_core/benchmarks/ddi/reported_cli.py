"""``check-reported``: the SkinGPT-R1 document's reported numbers, recomputed from counts."""

from __future__ import annotations

import argparse

from medeval_core.cli import CommandError, CommandGroups, print_json


def register(groups: CommandGroups) -> None:
    parser = groups.top.add_parser(
        "check-reported",
        help="recompute the SkinGPT-R1 reported results from counts",
        description="Recompute PanDerm and SkinGPT-R1 160-case accuracy, their difference, and Wilson 95% intervals.",
    )
    parser.add_argument("--wilson", action="append", default=[], metavar="K/N",
                        help="also print the Wilson 95%% interval for K successes out of N (repeatable)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    from medeval_core.benchmarks.ddi.reported import check_reported, parse_counts  # scipy: imported only when used

    try:
        extra = [parse_counts(text) for text in args.wilson]
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    result = check_reported(extra)
    if args.json:
        print_json(result.model_dump(mode="json"))
        return 0 if result.all_match else 1
    print("SkinGPT-R1 160-case classification comparison, recomputed from counts")
    for model in result.models:
        verdict = "matches" if model.matches else f"DIFFERS from reported {model.reported_percent} %"
        print(f"  {model.name:<11} {model.correct}/{model.total} = {model.percent} %  "
              f"(Wilson 95 %: {model.wilson_low_percent}-{model.wilson_high_percent} %)  {verdict}")
    diff = result.difference
    verdict = ("matches" if diff.matches
               else f"DIFFERS from reported {diff.reported_cases} cases, {diff.reported_points}")
    print(f"  Difference  {diff.cases} cases, {diff.points} percentage points "
          f"(before rounding: {diff.points_unrounded:.4f})  {verdict}")
    for interval in result.wilson:
        print(f"  Wilson 95 % for {interval.correct}/{interval.total} ({interval.percent} %): "
              f"{interval.wilson_low_percent}-{interval.wilson_high_percent}")
    print("All reported values match." if result.all_match else "Some reported values do not match the counts.")
    return 0 if result.all_match else 1
