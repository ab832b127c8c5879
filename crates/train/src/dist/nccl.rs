//! Tensors on GPUs summed, scattered, gathered and broadcast by NCCL (through cudarc's
//! bindings, as candle re-exports them), with the control plane — rank, world size, byte
//! exchange, the death of a rank — over a [`TcpWorld`].
//!
//! Every operation runs on the communicator's CUDA stream — candle's stream of the
//! device the world was made with, for `Device::new_cuda` the GPU's default stream,
//! which every such handle shares — after the kernels that produced its input (a tensor
//! whose handle has a stream of its own is ordered by an event), and the host then
//! waits for it. Waiting costs little (a collective ends every optimiser step anyway)
//! and it is what makes a dead rank survivable: NCCL has no timeout of its own, and a
//! kernel waiting for a peer that died spins forever, so a plain stream synchronisation
//! would never return. The host polls the operation's completion instead, and between
//! polls looks at the control plane:
//!
//! - when the [`TcpWorld`] aborts (a rank's connection closed without a goodbye, or it
//!   stayed silent past the heartbeat limit: [`Abort`]'s token is cancelled), the
//!   communicator is aborted (`ncclCommAbort`, which cudarc calls when its `Comm` is
//!   dropped): the waiting kernels return, and the call fails with the world's reason;
//! - when an operation outlives `AGENT_NCCL_TIMEOUT_SECS` (default 600, PyTorch's NCCL
//!   default) with every rank alive — ranks calling different collectives, a hung GPU —
//!   this rank ends the world for everyone ([`Collective::fail`]) and aborts likewise.
//!
//! After an abort every later operation fails at once. Communicator creation waits the
//! same way (it is collective: a rank that died before joining would keep the others in
//! `ncclCommInitRank` forever), on a helper thread that is abandoned if it never returns.
//! What stays uncovered: an NCCL call that blocks the host itself while enqueueing (NCCL
//! connects peers lazily on the first collective, over its own sockets); the process
//! then needs its launcher's time limit.
//!
//! Sums are the same on every rank (NCCL reduces each chunk once and shares it), but not
//! necessarily in rank order nor bit-equal to [`Collective`]'s host default.

use std::ffi::c_char;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use candle_core::cuda_backend::cudarc::nccl::{Comm, Id, NcclType, ReduceOp};
use candle_core::cuda_backend::{CudaDType, CudaStorageSlice};
use candle_core::op::BackpropOp;
use candle_core::{CudaDevice, CudaStorage, Device, Shape, Storage, Tensor};

use super::tcp::{Abort, TcpWorld};
use super::Collective;
use crate::error::{TensorContext, TrainError};

/// How long one operation (or the communicator's creation) may take before this rank
/// ends the world (`AGENT_NCCL_TIMEOUT_SECS` overrides).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Bytes of an NCCL unique id.
const ID_BYTES: usize = 128;

/// A communicator that may move between threads.
struct SendComm(Comm);

// SAFETY: `Comm` is `!Send` only because it holds the raw `ncclComm_t` handle; its other
// fields (an `Arc<CudaStream>`, two `usize`s) are `Send`. NCCL ties a communicator to a
// device, not to a thread: its documentation asks only that one communicator not be used
// by several threads at once, and `NcclWorld` keeps it behind a `Mutex`, so every call on
// it (collectives and the abort in `Comm`'s drop) is made by one thread at a time. The
// calling thread binds the device's CUDA context first (`bind_context`), which is the
// only per-thread state NCCL relies on.
unsafe impl Send for SendComm {}

/// The collective operations this backend runs on the GPU.
#[derive(Clone, Copy)]
enum Op {
    AllReduce,
    ReduceScatter,
    AllGather,
    Broadcast(usize),
}

/// A rank of a world whose tensors on CUDA devices are exchanged by NCCL (see the module
/// docs); tensors on the CPU take [`Collective`]'s host path over the control plane.
pub struct NcclWorld {
    // Declared first so that it is dropped (ncclCommAbort) before the control plane says
    // goodbye: no peer can then take this rank's departure for the end of a collective.
    comm: Mutex<Option<SendComm>>,
    device: CudaDevice,
    abort: Arc<Abort>,
    timeout: Duration,
    control: TcpWorld,
}

impl std::fmt::Debug for NcclWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclWorld").field("rank", &self.rank()).field("world_size", &self.world_size()).finish()
    }
}

impl NcclWorld {
    /// Creates the NCCL communicator of `control`'s world on `device` (a CUDA device, the
    /// same ordinal the rank's model lives on): rank 0 makes the unique id, every rank
    /// receives it over the control plane and joins. Fails on every rank (and ends the
    /// world) when one rank cannot join.
    pub fn new(control: TcpWorld, device: &Device) -> Result<Self, TrainError> {
        let Device::Cuda(cuda) = device else {
            let why = format!("NCCL needs a CUDA device, not {device:?}");
            control.fail(&why);
            return Err(TrainError::Distributed(why));
        };
        let (rank, size) = (control.rank(), control.world_size());
        let mine = if rank == 0 {
            match Id::new() {
                Ok(id) => id.internal().iter().map(|c| c.to_ne_bytes()[0]).collect(),
                Err(e) => {
                    let why = format!("rank 0 cannot make an NCCL id: {:?} (is libnccl.so.2 found?)", e.0);
                    control.fail(&why);
                    return Err(TrainError::Distributed(why));
                }
            }
        } else {
            Vec::new()
        };
        let all = control.all_gather_bytes(&mine)?;
        let id_bytes: [u8; ID_BYTES] = match all.first().map(|b| <[u8; ID_BYTES]>::try_from(b.as_slice())) {
            Some(Ok(b)) => b,
            _ => {
                let why = "rank 0 sent an NCCL id of the wrong size".to_string();
                control.fail(&why);
                return Err(TrainError::Distributed(why));
            }
        };
        let id = Id::uninit(id_bytes.map(|b| c_char::from_ne_bytes([b])));
        let abort = control.abort();
        let timeout = timeout();
        let comm = match create_comm(cuda, rank, size, id, &abort, timeout) {
            Ok(c) => c,
            Err(why) => {
                control.fail(&why);
                return Err(TrainError::Distributed(abort.reason().unwrap_or(why)));
            }
        };
        Ok(NcclWorld { comm: Mutex::new(Some(comm)), device: cuda.clone(), abort, timeout, control })
    }

    /// [`NcclWorld::new`] on CUDA device `ordinal` (a rank's `LOCAL_RANK`), for callers that
    /// hold no candle device of their own.
    pub fn on_gpu(control: TcpWorld, ordinal: usize) -> Result<Self, TrainError> {
        match crate::throughput::cuda_device(ordinal) {
            Ok(device) => NcclWorld::new(control, &device),
            Err(e) => {
                control.fail(&format!("rank {}: {e}", control.rank()));
                Err(e)
            }
        }
    }

    /// The control plane (rollout exchange, barriers, the world's end).
    pub fn control(&self) -> &TcpWorld {
        &self.control
    }

    /// Runs `op` on `t` through NCCL; `None` when `t` is not on this world's GPU or has a
    /// dtype left to the host path.
    fn run(&self, t: &Tensor, op: Op) -> Result<Option<Tensor>, TrainError> {
        // The GPU, not candle's device handle, decides: each `Device::new_cuda` is a
        // handle of its own, and the model's need not be the one this world was made with.
        let on_gpu = |d: &CudaDevice| d.cuda_stream().context().ordinal();
        let data = match t.device() {
            Device::Cuda(d) if on_gpu(d) == on_gpu(&self.device) => d.clone(),
            _ => return Ok(None),
        };
        let (n, w) = (t.elem_count(), self.world_size());
        let (out_len, out_shape): (usize, Shape) = match op {
            Op::AllReduce | Op::Broadcast(_) => (n, t.shape().clone()),
            Op::ReduceScatter => (n / w, (n / w).into()),
            Op::AllGather => (n * w, (n * w).into()),
        };
        let t = t.contiguous().ctx("an NCCL input")?;
        let mut guard = self.lock()?;
        let Some(comm) = guard.as_ref() else {
            return Err(self.ended());
        };
        self.device
            .cuda_stream()
            .context()
            .bind_to_thread()
            .map_err(|e| TrainError::Distributed(format!("cannot bind the CUDA context for NCCL: {e:?}")))?;
        let enqueued = {
            let (storage, layout) = t.storage_and_layout();
            let Storage::Cuda(cs) = &*storage else { return Ok(None) };
            let Some((start, end)) = layout.contiguous_offsets() else {
                return Err(TrainError::Distributed("an NCCL input is not contiguous".into()));
            };
            let (c, dev, rank) = (&comm.0, &data, self.rank());
            match &cs.slice {
                CudaStorageSlice::F32(s) => enqueue(c, dev, s, start..end, op, rank, out_len),
                CudaStorageSlice::BF16(s) => enqueue(c, dev, s, start..end, op, rank, out_len),
                CudaStorageSlice::F16(s) => enqueue(c, dev, s, start..end, op, rank, out_len),
                CudaStorageSlice::F64(s) => enqueue(c, dev, s, start..end, op, rank, out_len),
                _ => return Ok(None),
            }
        };
        let out = match enqueued {
            Ok(s) => s,
            Err(why) => return Err(self.end(&mut guard, why)),
        };
        self.wait(&mut guard)?;
        Ok(Some(Tensor::from_storage(Storage::Cuda(out), out_shape, BackpropOp::none(), false)))
    }

    /// Waits until everything enqueued on the stream (the collective last) has run,
    /// aborting on the world's end or past the time limit (see the module docs).
    fn wait(&self, guard: &mut MutexGuard<'_, Option<SendComm>>) -> Result<(), TrainError> {
        let event = match self.device.cuda_stream().record_event(None) {
            Ok(e) => e,
            Err(e) => return Err(self.end(guard, format!("cannot record a CUDA event after a collective: {e:?}"))),
        };
        let start = Instant::now();
        let mut pause = Duration::from_micros(20);
        loop {
            match event.try_is_complete() {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(self.end(guard, format!("an NCCL collective failed on the GPU: {e:?}"))),
            }
            if let Some(why) = self.abort.reason() {
                abort_comm(guard);
                return Err(TrainError::Distributed(why));
            }
            if start.elapsed() > self.timeout {
                let why = format!(
                    "rank {}: an NCCL collective did not finish within {} s (ranks running different collectives, \
                     or a hung GPU; AGENT_NCCL_TIMEOUT_SECS sets the limit)",
                    self.rank(),
                    self.timeout.as_secs()
                );
                return Err(self.end(guard, why));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    /// Ends the world with `why` and aborts the communicator; the error to return.
    fn end(&self, guard: &mut MutexGuard<'_, Option<SendComm>>, why: String) -> TrainError {
        self.control.fail(&why);
        abort_comm(guard);
        TrainError::Distributed(self.abort.reason().unwrap_or(why))
    }

    fn ended(&self) -> TrainError {
        TrainError::Distributed(self.abort.reason().unwrap_or_else(|| "the NCCL communicator was aborted".into()))
    }

    fn lock(&self) -> Result<MutexGuard<'_, Option<SendComm>>, TrainError> {
        self.comm.lock().map_err(|_| TrainError::Distributed("a thread panicked during an NCCL collective".into()))
    }
}

impl Collective for NcclWorld {
    fn rank(&self) -> usize {
        self.control.rank()
    }

    fn world_size(&self) -> usize {
        self.control.world_size()
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TrainError> {
        self.control.all_gather_bytes(mine)
    }

    fn finish(&self) -> Result<(), TrainError> {
        // Every rank waits for its own collectives before it joins the control plane's
        // barrier, so none is in flight anywhere once it passes.
        self.control.finish()
    }

    fn fail(&self, why: &str) {
        self.control.fail(why);
    }

    fn aborted(&self) -> Option<tokio_util::sync::CancellationToken> {
        self.control.aborted()
    }

    fn abort_reason(&self) -> Option<String> {
        self.control.abort_reason()
    }

    fn all_reduce_sum(&self, t: &Tensor) -> Result<Tensor, TrainError> {
        if self.world_size() == 1 {
            return Ok(t.clone());
        }
        match self.run(t, Op::AllReduce)? {
            Some(out) => Ok(out),
            None => self.control.all_reduce_sum(t),
        }
    }

    fn reduce_scatter_sum(&self, t: &Tensor) -> Result<Tensor, TrainError> {
        if super::scatter_is_identity(t, self.world_size())? {
            return Ok(t.clone());
        }
        match self.run(t, Op::ReduceScatter)? {
            Some(out) => Ok(out),
            None => self.control.reduce_scatter_sum(t),
        }
    }

    fn all_gather(&self, t: &Tensor) -> Result<Tensor, TrainError> {
        if self.world_size() == 1 {
            return Ok(t.clone());
        }
        match self.run(t, Op::AllGather)? {
            Some(out) => Ok(out),
            None => self.control.all_gather(t),
        }
    }

    fn broadcast(&self, t: &Tensor, root: usize) -> Result<Tensor, TrainError> {
        if self.world_size() == 1 {
            return Ok(t.clone());
        }
        if root >= self.world_size() {
            return Err(TrainError::Other(format!("broadcast from rank {root} of {}", self.world_size())));
        }
        match self.run(t, Op::Broadcast(root))? {
            Some(out) => Ok(out),
            None => self.control.broadcast(t, root),
        }
    }
}

/// Enqueues `op` on `src[range]` (a tensor of `device`) on the communicator's stream, into
/// a new buffer of `out_len` elements of `device`.
fn enqueue<T>(
    comm: &Comm,
    device: &CudaDevice,
    src: &CudaSlice<T>,
    range: Range<usize>,
    op: Op,
    rank: usize,
    out_len: usize,
) -> Result<CudaStorage, String>
where
    T: NcclType + DeviceRepr + ValidAsZeroBits + CudaDType,
{
    let src = src.slice(range);
    let mut dst = device.alloc_zeros::<T>(out_len).map_err(|e| format!("cannot allocate an NCCL output: {e}"))?;
    let (data_stream, comm_stream) = (device.cuda_stream(), comm.stream());
    if data_stream.cu_stream() != comm_stream.cu_stream() {
        // A device handle with a stream of its own: NCCL must start after the kernels that
        // wrote the input and zeroed the output there.
        let ready = data_stream.record_event(None).map_err(|e| format!("cannot order NCCL after its input: {e:?}"))?;
        comm_stream.wait(&ready).map_err(|e| format!("cannot order NCCL after its input: {e:?}"))?;
    }
    let done = match op {
        Op::AllReduce => comm.all_reduce(&src, &mut dst, &ReduceOp::Sum),
        Op::ReduceScatter => comm.reduce_scatter(&src, &mut dst, &ReduceOp::Sum),
        Op::AllGather => comm.all_gather(&src, &mut dst),
        Op::Broadcast(root) => {
            let nccl_root = i32::try_from(root).map_err(|_| format!("broadcast root {root} is out of NCCL's range"))?;
            // Only the root's buffer is read.
            comm.broadcast((rank == root).then_some(&src), &mut dst, nccl_root)
        }
    };
    done.map_err(|e| {
        format!("rank {rank}: NCCL refused a collective: {:?} (NCCL_DEBUG=WARN says more on standard error)", e.0)
    })?;
    Ok(CudaStorage::wrap_cuda_slice(dst, device.clone()))
}

/// Creates the communicator on a helper thread, waiting for it while watching the control
/// plane and the time limit (a rank that never joins would block `ncclCommInitRank`).
fn create_comm(
    cuda: &CudaDevice,
    rank: usize,
    size: usize,
    id: Id,
    abort: &Abort,
    timeout: Duration,
) -> Result<SendComm, String> {
    let stream = cuda.cuda_stream();
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name("nccl-init".into())
        .spawn(move || {
            let made = stream
                .context()
                .bind_to_thread()
                .map_err(|e| format!("cannot bind the CUDA context for NCCL: {e:?}"))
                .and_then(|()| {
                    Comm::from_rank(stream, rank, size, id).map(SendComm).map_err(|e| {
                        format!(
                            "rank {rank}: NCCL could not create its communicator: {:?} (NCCL_DEBUG=WARN says more on \
                             standard error)",
                            e.0
                        )
                    })
                });
            // A receiver that gave up is gone: the communicator then drops (and aborts) here.
            let _ = tx.send(made);
        })
        .map_err(|e| format!("cannot start the NCCL set-up thread: {e}"))?;
    let start = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(made) => return made,
            Err(RecvTimeoutError::Disconnected) => return Err("the NCCL set-up thread panicked".into()),
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Some(why) = abort.reason() {
            return Err(why);
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "rank {rank}: the NCCL communicator was not created within {} s (a rank that never joined?)",
                timeout.as_secs()
            ));
        }
    }
}

/// Aborts the communicator (cudarc's `Comm` calls ncclCommAbort when dropped), which ends
/// the kernels still waiting for peers. cudarc panics when the abort itself fails: that
/// panic is contained, the world being over either way.
fn abort_comm(guard: &mut MutexGuard<'_, Option<SendComm>>) {
    if let Some(comm) = guard.take() {
        let _ = std::panic::catch_unwind(AssertUnwindSafe(move || drop(comm)));
    }
}

fn timeout() -> Duration {
    super::env::seconds_from_env("AGENT_NCCL_TIMEOUT_SECS", DEFAULT_TIMEOUT)
}
