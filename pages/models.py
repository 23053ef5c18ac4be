"""Models: register backends per role (an OpenAI-compatible endpoint or a local Qwen2.5-VL checkpoint), test
each with one request, and choose the default per role. Stored in the store (never a key); the launcher, the
lesion page and the walkthroughs use the defaults at once, and MEDEVAL_<ROLE>_* variables still win."""

import pandas as pd
import streamlit as st

from medeval_core.controllers.models import Models
from medeval_core.plaintext import literal

KINDS = {"openai": "OpenAI-compatible endpoint", "transformers": "Local Qwen2.5-VL checkpoint folder"}

st.title("Models")
st.caption("Register the model backends each role can use and pick one default per role. Keys are never stored: "
           "give the name of the environment variable or Streamlit secret that holds the key. A MEDEVAL_<ROLE>_* "
           "variable set on the server overrides the default chosen here.")

models = Models()
declared = models.declared_roles
roles = models.roles

st.subheader("In use now")
if notice := st.session_state.pop("models_notice", None):
    st.success(literal(notice))
st.dataframe(pd.DataFrame([
    {"role": row.role, "used by": row.used_by, "backend": row.backend, "model": row.model, "base URL": row.base_url,
     "key variable": row.api_key_env, "key set": row.api_key_set, "set by the environment": row.set_by_environment}
    for row in models.in_use()]), hide_index=True, width="stretch")

st.subheader("Registered backends")
backends = models.backends()
if not backends:
    st.info("No backend registered yet: add one below.")
for backend in backends:
    with st.container(border=True):
        left, right = st.columns([3, 2])
        title = f"{backend.role}: {backend.name}" + (" (default)" if backend.is_default else "")
        left.markdown(f"**{literal(title)}**")
        left.caption(literal(f"{KINDS[backend.backend]}: {backend.model}"
                                    + (f" at {backend.base_url}, key in {backend.api_key_env}"
                                       if backend.base_url else "")))
        test, default, remove = right.columns(3)
        if test.button("Test", key=f"test-{backend.id}", help="one cheap request (one output token)"):
            check = models.test(backend)
            if check is not None and check.ok:
                left.success(literal(check.message()))
            elif check is not None:
                left.error(literal(check.message()))
        if not backend.is_default and default.button("Make default", key=f"default-{backend.id}"):
            models.make_default(backend)
            st.rerun()
        if remove.button("Remove", key=f"remove-{backend.id}"):
            if refused := models.remove(backend).error:
                st.error(literal(refused))
            st.rerun()

st.subheader("Register a backend")
REGISTER_FIELDS = ("model_role", "model_name", "model_base_url", "model_model", "model_key_env", "model_make_default",
                   "model_test_first")
kind = st.radio("Kind", list(KINDS), format_func=KINDS.get, horizontal=True, key="model_kind")
with st.form("register_backend", clear_on_submit=False):
    role = st.selectbox("Role", roles, key="model_role", accept_new_options=True,
                        help="; ".join(f"{r}: used by {', '.join(b)}" for r, b in declared.items()))
    name = st.text_input("Name", key="model_name", help="how lists show it, e.g. 'vLLM Qwen2.5-7B on gpu-3'")
    if kind == "openai":
        base_url = st.text_input("Base URL", key="model_base_url", placeholder="http://host:8000/v1")
        model = st.text_input("Model", key="model_model", help="the model name the server serves")
        api_key_env = st.text_input("Key variable name", key="model_key_env",
                                    help="the environment variable or Streamlit secret that holds the key "
                                         "(default MEDEVAL_<ROLE>_API_KEY); never the key itself")
    else:
        base_url = ""
        model = st.text_input("Checkpoint folder", key="model_model",
                              help="a Qwen2.5-VL checkpoint folder with config.json and *.safetensors")
        api_key_env = ""
    make_default = st.checkbox("Make it the role's default", key="model_make_default")
    test_first = st.checkbox("Test it with one request before saving", value=True, key="model_test_first")
    submitted = st.form_submit_button("Register", type="primary")

if submitted:
    registered = models.register(role=role or "", name=name, backend=kind, model=model, base_url=base_url,
                                 api_key_env=api_key_env, make_default=make_default, test_first=test_first)
    if registered.error:
        st.error(literal(registered.error))
    else:
        st.session_state["models_notice"] = registered.notice
        for field in REGISTER_FIELDS:  # a registered backend empties the form; a refused one keeps it to fix
            st.session_state.pop(field, None)
        st.rerun()
