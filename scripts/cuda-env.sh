# Sourced by the CUDA scripts: installs the CUDA 13 toolchain from PyPI into $CUDA_VENV
# (default /opt/cu13) once, and exports what candle's and mistral.rs's build scripts need
# (see docs/development.md). About 1 GB of wheels the first time.
venv="${CUDA_VENV:-/opt/cu13}"
if [ ! -x "$venv/bin/pip" ]; then python3 -m venv "$venv"; fi
site="$("$venv/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
C="$site/nvidia/cu13"
# The compiler must not be newer than the GPU machine's driver: PTX from nvcc 13.2 is
# refused by a 13.0 driver (CUDA_ERROR_UNSUPPORTED_PTX_VERSION, seen on the lent H200s,
# driver 580). 13.0 also suits mistralrs-quant 0.8.1, whose build script knows up to 13.2.
cu="${CUDA_WHEEL_VERSION:-13.0.*}"
if ! "$C/bin/nvcc" --version 2>/dev/null | grep -q "release ${cu%.*}"; then
  "$venv/bin/pip" install --quiet "nvidia-cuda-nvcc==$cu" "nvidia-cuda-runtime==$cu" "nvidia-cuda-cccl==$cu" \
    "nvidia-cuda-crt==$cu" "nvidia-cuda-nvrtc==$cu" "nvidia-nvvm==$cu" nvidia-cublas nvidia-curand nvidia-nccl-cu13
fi
for lib in cublas cublasLt cudart curand nvrtc; do
  real="$(ls "$C/lib/lib$lib.so."* 2>/dev/null | head -n 1)"
  [ -n "$real" ] && ln -sf "$real" "$C/lib/lib$lib.so"
done
CUDA_NCCL_LIB="$site/nvidia/nccl/lib"
ln -sf "$(ls "$CUDA_NCCL_LIB"/libnccl.so.* | head -n 1)" "$CUDA_NCCL_LIB/libnccl.so"
# Linking needs libcuda.so, which only a driver installs: a stub with the right soname
# stands in; the driver's library is the one loaded at run time.
CUDA_STUB_DIR="$venv/stub"
if [ ! -f "$CUDA_STUB_DIR/libcuda.so" ]; then
  mkdir -p "$CUDA_STUB_DIR"
  echo 'void agent_cuda_stub(void){}' > "$CUDA_STUB_DIR/stub.c"
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$CUDA_STUB_DIR/libcuda.so" "$CUDA_STUB_DIR/stub.c"
fi
export PATH="$C/bin:$PATH" CUDA_ROOT="$C" CUDA_PATH="$C" CUDA_HOME="$C" \
  CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}" CUDARC_CUDA_VERSION=13000 CUDA_NCCL_LIB CUDA_STUB_DIR
