# The app as one replica: slim Python 3.11, the pinned requirements, a non-root user, a health check.
# Not built on the development machines (no Docker daemon there): see docs/serving.md.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY requirements.txt requirements-nodeps.txt ./
# torch's CPU wheel: the default index would pull a multi-GB CUDA build
RUN pip install --extra-index-url https://download.pytorch.org/whl/cpu -r requirements.txt \
    && pip install --no-deps -r requirements-nodeps.txt
COPY . .
RUN useradd --create-home --uid 1000 explorer && chown -R explorer /app
USER explorer

EXPOSE 8501
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=2)"
CMD ["python", "-m", "ui.launch", "app.py", "--server.port", "8501", "--server.address", "0.0.0.0", "--server.headless", "true"]
