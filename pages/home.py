"""Home: what medeval does, what each page is for, and the state of the store, data and model backends."""

import pandas as pd
import streamlit as st

from medeval_core.controllers.home import Home, SettingsError, pages
from medeval_core.plaintext import literal, literal_cells

st.title("medeval")
st.markdown(
    "A workbench for evaluating diagnostic AI on published protocols. Clinicians walk through cases and annotate "
    "model outputs; ML teams point medeval at a model (a local Qwen2.5-VL checkpoint or any OpenAI-compatible "
    "endpoint), run benchmarks in batch, resume them after a crash and compare runs with confidence intervals. "
    "Every score is stored with the model, judge, prompts and settings that produced it."
)

st.header("Start here")
st.markdown("No model is needed to try medeval on these pages:")
for info in pages():
    if info.start_here:
        st.page_link(info.path, label=f"{info.title}: {info.start_here}", icon=info.icon)

st.header("Pages")
for info in pages():
    if info.url_path != "home":
        st.page_link(info.path, label=info.title, icon=info.icon)
        st.caption(info.description)
if len(pages()) == 2:
    st.info("The benchmark pages appear here as they are installed. Until then, use the command line: "
            "`python -m medeval_core --help`.")

try:
    home = Home()
except SettingsError as exc:
    st.error(f"Settings could not be loaded: {literal(exc)}")
    st.stop()

st.header("Data sources")
st.caption(f"Looked up under {literal(home.data_dir)} (set `MEDEVAL_DATA_DIR` to change it).")
st.table(literal_cells(
    pd.DataFrame([row.model_dump(exclude={"icon"}) for row in home.data_sources()])
    .set_index("name")
    .rename(columns={"state": "Status", "files": "Files", "how_to_get": "How to get it",
                     "used_by": "Used by"})
    .rename_axis("Source")
))

st.header("Model backends")
st.table(literal_cells(
    pd.DataFrame([b.model_dump() for b in home.backends()])
    .set_index("role")
    .rename(columns={"used_by": "Used by", "backend": "Backend", "model": "Model", "base_url": "Endpoint",
                     "configured": "Configured", "working": "Works",
                     "api_key_env": "API key variable", "api_key_set": "Key set", "hint": "How to configure"})
    .rename_axis("Role")
))

st.header("Store")
store = home.store()
if store.reachable:
    st.text(store.url)
    st.table(pd.DataFrame([store.counts], index=["rows"]))
else:
    st.error(f"The store at {literal(store.url)} cannot be opened ({literal(store.error)}). Check `MEDEVAL_DB_URL`.")

with st.expander("Effective settings and versions"):
    st.write(f"Settings hash `{home.settings_hash()}`")
    st.json(home.versions())
    st.json(home.effective_settings())
