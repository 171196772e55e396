# code-interpreter-v1: E2B's code interpreter on Jupyter kernels. The interpreter itself is the
# sandboxd agent (`/.sandboxd/agent interpreter`, the template's start command); this image only
# adds the kernels and the libraries agents reach for, in a virtualenv that leads the PATH (the
# base's /usr is the host's, read-only) — also in login shells, which reset PATH.
FROM base
ENV VIRTUAL_ENV=/opt/interpreter \
    PATH=/opt/interpreter/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    JUPYTER_PATH=/opt/interpreter/share/jupyter \
    MPLCONFIGDIR=/opt/interpreter/matplotlib \
    MPLBACKEND=module://matplotlib_inline.backend_inline
RUN python3 -m venv /opt/interpreter \
 && pip install --no-cache-dir --disable-pip-version-check --quiet \
      ipykernel numpy pandas matplotlib bash_kernel \
 && python -m ipykernel install --sys-prefix --name python3 \
 && python -m bash_kernel.install --sys-prefix \
 && mkdir -p "$MPLCONFIGDIR" && python -c "import matplotlib.pyplot" \
 && chown -R 1000:1000 "$MPLCONFIGDIR" \
 && echo 'export PATH="/opt/interpreter/bin:$PATH"' > /etc/profile.d/sandboxd-interpreter.sh
