"""Annotation results (administrators): win rates with Wilson 95 % intervals (ties apart), inter-annotator
agreement, judge-versus-clinician agreement, patient-answer ratings per patient system, and the CSV of every
answer. The same figures as `python -m medeval_core annotations report TASK --json`."""

import pandas as pd
import streamlit as st

from medeval_core.controllers.annotation_results import Results


def interval(bounds: tuple[float, float] | None, percent: bool = True) -> str:
    if bounds is None:
        return ""
    return f"{bounds[0]:.1%} - {bounds[1]:.1%}" if percent else f"{bounds[0]:.2f} - {bounds[1]:.2f}"


results = Results()
st.title("Annotation results")
tasks = results.tasks()
if not tasks:
    st.info("No annotation tasks yet; create one on the Annotation tasks page.")
    st.stop()
titles = {t.id: f"{t.title} · {t.kind} · {t.id}" for t in tasks}
task_id = st.selectbox("Task", list(titles), format_func=titles.__getitem__, key="results-task")
report = results.report(task_id)

done_share = report.assignments_done / report.assignments if report.assignments else 0.0
st.progress(done_share, text=f"{report.assignments_done} of {report.assignments} assignments done "
                             f"({report.items} items; {report.current_answers} current answers, "
                             f"{report.annotation_rows} rows including edits)")
if report.win_rates:
    st.subheader("Win rate per criterion")
    st.caption("A's wins over the decisive answers, ties reported apart; each annotator's answer counts once.")
    st.dataframe(pd.DataFrame([
        {"criterion": w.criterion, "A": w.label_a, "B": w.label_b, "A wins": w.a_wins, "B wins": w.b_wins,
         "ties": w.ties, "A win rate": None if w.a_win_rate is None else round(w.a_win_rate, 4),
         "95% Wilson": interval(w.interval)} for w in report.win_rates
    ]), hide_index=True, width="stretch")
if report.ratings:
    st.subheader("Simulated-patient answers (0-2)")
    st.dataframe(pd.DataFrame([
        {"patient system": r.patient_system, "criterion": r.criterion, "n": r.n,
         "mean": None if r.mean is None else round(r.mean, 3), "95% t interval": interval(r.interval, False)}
        for r in report.ratings
    ]), hide_index=True, width="stretch")
for judge in report.judge_agreement:
    st.subheader("Judge versus clinicians")
    st.text(f"{judge.judge}: kappa {'undefined' if judge.kappa is None else f'{judge.kappa:.3f}'} over "
            f"{judge.n} answers; clinicians agreed {'' if judge.agree_share is None else f'{judge.agree_share:.1%}'}")
    st.dataframe(pd.DataFrame(judge.confusion).T.rename_axis("judge said \\ clinician said"), width="content")
if report.agreement:
    st.subheader("Agreement between annotators")
    st.dataframe(pd.DataFrame([
        {"criterion": a.criterion, "statistic": a.statistic.replace("_", " "),
         "value": a.shown, "annotators": a.annotators,
         "overlapping items": a.overlapping_items} for a in report.agreement
    ]), hide_index=True, width="stretch")
else:
    st.caption("Agreement needs items answered by at least two annotators.")

st.download_button("Download every answer (CSV)", results.answers_csv(task_id),
                   file_name=f"{task_id}-annotations.csv", mime="text/csv")
