"""Annotator accounts and annotation tasks from the command line (the administrator's side).

``annotators add NAME`` reads the passcode from standard input (a prompt on a terminal, else the first line), never
from a flag, so it stays out of shell history and process lists. Light at import, like the other command modules.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medeval_core.cli import CommandError, CommandGroups, print_json

if TYPE_CHECKING:
    from medeval_core.annotation.tasks import Assignment
    from medeval_core.store import Store


def _store() -> Store:
    from medeval_core.context import current_store

    return current_store()


@contextmanager
def _user_errors() -> Iterator[None]:
    from medeval_core.annotation.accounts import AccountError
    from medeval_core.annotation.items import ItemError

    try:
        yield
    except (AccountError, ItemError) as exc:
        raise CommandError(str(exc)) from exc


def _handler(function: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        with _user_errors():
            return function(args)

    return handle


def register(groups: CommandGroups) -> None:
    annotators = groups.top.add_parser("annotators", help="clinician annotator accounts").add_subparsers(
        dest="annotators_command", required=True, metavar="ACTION")
    add = annotators.add_parser("add", help="add an account; the passcode is read from standard input")
    add.add_argument("name")
    add.add_argument("--admin", action="store_true", help="may create tasks and see unblinded results")
    add.add_argument("--oidc", action="store_true",
                     help="no passcode: the account signs in through OpenID Connect (NAME is its e-mail address)")
    add.set_defaults(handler=_handler(_add))
    listing = annotators.add_parser("list", help="list accounts")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_handler(_list))
    disable = annotators.add_parser("disable", help="stop an account from signing in (its answers are kept)")
    disable.add_argument("name")
    disable.set_defaults(handler=_handler(_disable))
    sign_out = annotators.add_parser("sign-out", help="end an account's sign-in in every browser (it signs in again)")
    sign_out.add_argument("name")
    sign_out.set_defaults(handler=_handler(_sign_out))

    annotations = groups.top.add_parser("annotations", help="annotation tasks, reports and exports").add_subparsers(
        dest="annotations_command", required=True, metavar="ACTION")
    task = annotations.add_parser("task", help="create and list tasks").add_subparsers(
        dest="task_command", required=True, metavar="ACTION")
    create = task.add_parser("create", help="create a task from stored runs").add_subparsers(
        dest="task_kind", required=True, metavar="KIND")
    pairwise = create.add_parser("pairwise", help="blinded preference between two runs' outputs on shared cases")
    pairwise.add_argument("--run-a", required=True)
    pairwise.add_argument("--run-b", required=True)
    pairwise.add_argument("--criteria", help="comma-separated (default: diagnostic accuracy, clinical coverage, "
                                             "reasoning coherence)")
    pairwise.set_defaults(handler=_handler(_create_pairwise))
    patient = create.add_parser("patient-answers", help="0-2 truthfulness and relevance of simulated-patient answers")
    patient.add_argument("--run", action="append", required=True, dest="runs", help="a dialogue run; repeatable")
    patient.set_defaults(handler=_handler(_create_patient_answers))
    judge = create.add_parser("judge-review", help="agree or disagree with a run's stored judge verdicts")
    judge.add_argument("--run", required=True, help="the run holding the judgements (a judge's score run)")
    judge.add_argument("--judge", help="only this judge's verdicts (default: every judge of the run)")
    judge.set_defaults(handler=_handler(_create_judge_review))
    for parser in (pairwise, patient, judge):
        parser.add_argument("--annotators", required=True, help="comma-separated account names")
        parser.add_argument("--per-item", type=int, help="annotators per item (default: all of them, full overlap)")
        parser.add_argument("--seed", type=int, help="side and order randomisation seed (default: drawn, recorded)")
        parser.add_argument("--max-items", type=int)
        parser.add_argument("--title", default="", help="shown to annotators: must not name a run or model")
        parser.add_argument("--by", default="cli", help="who creates the task (recorded)")
        parser.add_argument("--json", action="store_true")
    tasks = task.add_parser("list", help="list tasks")
    tasks.add_argument("--json", action="store_true")
    tasks.set_defaults(handler=_handler(_list_tasks))

    report = annotations.add_parser("report", help="win rates, agreement, judge agreement and ratings of a task")
    report.add_argument("task_id")
    report.add_argument("--json", action="store_true")
    report.set_defaults(handler=_handler(_report))
    export = annotations.add_parser("export", help="every answer of a task (annotator, time, task) as CSV")
    export.add_argument("task_id")
    export.add_argument("--out", type=Path, required=True)
    export.set_defaults(handler=_handler(_export))


def _read_passcode() -> str:
    if sys.stdin.isatty():
        import getpass

        first = getpass.getpass("Passcode: ")
        if getpass.getpass("Passcode again: ") != first:
            raise CommandError("The two passcodes differ; run the command again.")
        return first
    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        raise CommandError("No passcode on standard input; pipe it in, e.g. `printf '%s\\n' \"$CODE\" | python -m "
                           "medeval_core annotators add NAME`.")
    return line


def _add(args: argparse.Namespace) -> int:
    from medeval_core.annotation.accounts import add_annotator

    passcode = None if args.oidc else _read_passcode()
    annotator = add_annotator(_store(), args.name, passcode, is_admin=args.admin)
    print(f"Added {'administrator' if annotator.is_admin else 'annotator'} {annotator.name}"
          f"{' (signs in through OpenID Connect)' if args.oidc else ''}.")
    return 0


def _list(args: argparse.Namespace) -> int:
    from medeval_core.annotation.accounts import list_annotators

    rows = list_annotators(_store())
    if args.json:
        print_json([row.model_dump(mode="json") for row in rows])
        return 0
    if not rows:
        print("No annotators yet; add one with `python -m medeval_core annotators add NAME`.")
    for row in rows:
        flags = [flag for flag, on in (("admin", row.is_admin), ("disabled", not row.active),
                                       ("oidc", not row.passcode)) if on]
        print(f"{row.name}  {' '.join(flags)}".rstrip())
    return 0


def _disable(args: argparse.Namespace) -> int:
    from medeval_core.annotation.accounts import disable_annotator

    disable_annotator(_store(), args.name)
    print(f"Disabled {args.name}; its answers are kept.")
    return 0


def _sign_out(args: argparse.Namespace) -> int:
    from medeval_core.annotation.accounts import revoke_sign_ins

    ended = revoke_sign_ins(_store(), args.name)
    print(f"Signed {args.name} out of {ended} browser sign-in(s).")
    return 0


def _assignment(args: argparse.Namespace) -> Assignment:
    from medeval_core.annotation.tasks import Assignment

    names = [name.strip() for name in args.annotators.split(",") if name.strip()]
    return Assignment(annotators=names, per_item=args.per_item or len(names))


def _created(args: argparse.Namespace, task: Any) -> int:
    if args.json:
        print_json(task.model_dump(mode="json"))
    else:
        print(f"Created task {task.id} ({task.kind}, seed {task.config['seed']}).")
    return 0


def _settings() -> Any:
    from medeval_core.context import current_settings

    return current_settings()


def _create_pairwise(args: argparse.Namespace) -> int:
    from medeval_core.annotation.tasks import DEFAULT_PAIRWISE_CRITERIA, create_pairwise_task

    criteria = [c.strip() for c in args.criteria.split(",")] if args.criteria else DEFAULT_PAIRWISE_CRITERIA
    task = create_pairwise_task(_store(), _settings(), args.run_a, args.run_b, _assignment(args), args.by,
                                criteria=criteria, title=args.title, seed=args.seed, max_items=args.max_items)
    return _created(args, task)


def _create_patient_answers(args: argparse.Namespace) -> int:
    from medeval_core.annotation.tasks import create_patient_answer_task

    task = create_patient_answer_task(_store(), _settings(), args.runs, _assignment(args), args.by,
                                      title=args.title, seed=args.seed, max_items=args.max_items)
    return _created(args, task)


def _create_judge_review(args: argparse.Namespace) -> int:
    from medeval_core.annotation.tasks import create_judge_review_task

    task = create_judge_review_task(_store(), _settings(), args.run, _assignment(args), args.by, judge=args.judge,
                                    title=args.title, seed=args.seed, max_items=args.max_items)
    return _created(args, task)


def _list_tasks(args: argparse.Namespace) -> int:
    from medeval_core.annotation.tasks import list_tasks

    rows = list_tasks(_store())
    if args.json:
        print_json([row.model_dump(mode="json") for row in rows])
        return 0
    if not rows:
        print("No annotation tasks yet.")
    for row in rows:
        print(f"{row.id}  {row.kind:<16} {row.created_at:%Y-%m-%d %H:%M}  {row.title}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from medeval_core.annotation.report import task_report

    report = task_report(_store(), args.task_id)
    if args.json:
        print_json(report.model_dump(mode="json"))
        return 0
    print(f"{report.task_id} ({report.kind}): {report.items} items, {report.assignments_done} of "
          f"{report.assignments} assignments done, {report.current_answers} current answers "
          f"({report.annotation_rows} rows with edits)")
    for win in report.win_rates:
        rate = "n/a" if win.a_win_rate is None or win.interval is None else (
            f"{win.a_win_rate:.1%} (95% CI {win.interval[0]:.1%}-{win.interval[1]:.1%})")
        print(f"  {win.criterion}: {win.system_a} preferred over {win.system_b} {rate}; "
              f"{win.a_wins}-{win.b_wins}, ties {win.ties}")
    for item in report.agreement:
        value = "undefined" if item.value is None else f"{item.value:.3f}"
        print(f"  agreement on {item.criterion}: {item.statistic} {value} ({item.annotators} annotators, "
              f"{item.overlapping_items} overlapping items)")
    for judge in report.judge_agreement:
        kappa = "undefined" if judge.kappa is None else f"{judge.kappa:.3f}"
        print(f"  judge {judge.judge}: kappa {kappa} over {judge.n} answers; confusion {judge.confusion}")
    for rating in report.ratings:
        interval = "" if rating.interval is None else f" (95% CI {rating.interval[0]:.2f}-{rating.interval[1]:.2f})"
        mean = "n/a" if rating.mean is None else f"{rating.mean:.2f}"
        print(f"  {rating.patient_system} {rating.criterion}: mean {mean}{interval}, n={rating.n}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from medeval_core.annotation.report import export_rows, write_csv

    rows = export_rows(_store(), args.task_id)
    write_csv(rows, args.out)
    print(f"wrote {len(rows)} answers to {args.out}")
    return 0
