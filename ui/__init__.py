"""Streamlit helpers shared by every page: the frame, URL state, figures. Pages stay thin."""
