"""The toy benchmark's page: proof that a benchmark's own pages join the navigation through its spec."""

import streamlit as st

st.title("Counting")
st.write("A toy benchmark that scores each case's index.")
