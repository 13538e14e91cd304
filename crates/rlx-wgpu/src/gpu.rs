//! One wgpu adapter opened for rlx: its device and queue, the command encoder that launches
//! and copies are recorded into until the next submit, the pipelines built for it (one per
//! distinct WGSL source), and the buffer that kernels report bad data into.
//!
//! Which adapter: `wgpu:N` is the N-th of the adapters wgpu finds (discrete GPUs first, CPU
//! renderers last), among those whose name contains `RLX_WGPU_ADAPTER` when it is set;
//! `WGPU_BACKEND` (`vulkan`, `metal`, `dx12`) limits the native APIs searched. wgpu's own
//! validation errors never panic: they are caught by error scopes around what can fail, and
//! any other is kept and returned by the next download or sync.

use crate::error::WgpuError;
use crate::memory::Usage;
use crate::shader::Kernel;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The backend's name in errors.
pub(crate) const NAME: &str = "wgpu";

/// Launches recorded before the encoder is submitted on its own.
const BATCH: usize = 128;

/// Bytes of one batch's parameter buffer: the launches' parameter words (mostly under 256
/// bytes), each at an offset the adapter can bind, written by one queue write before the
/// batch is submitted; a batch whose words outgrow it is submitted early.
const PARAM_BYTES: usize = BATCH * 256;

/// Openings so far, numbering each.
static OPENED: AtomicU64 = AtomicU64::new(1);

/// What every kernel needs of an adapter: (limit, least value).
const NEEDED: [(&str, u64); 4] = [
    ("max_storage_buffers_per_shader_stage", 8),
    ("max_compute_invocations_per_workgroup", 256),
    ("max_compute_workgroup_size_x", 256),
    ("max_compute_workgroup_storage_size", 8192),
];

/// The value of the named limit in `l` (those of [`NEEDED`]).
fn limit_of(l: &wgpu::Limits, name: &str) -> u64 {
    match name {
        "max_storage_buffers_per_shader_stage" => l.max_storage_buffers_per_shader_stage.into(),
        "max_compute_invocations_per_workgroup" => l.max_compute_invocations_per_workgroup.into(),
        "max_compute_workgroup_size_x" => l.max_compute_workgroup_size_x.into(),
        _ => l.max_compute_workgroup_storage_size.into(),
    }
}

/// An adapter's name as errors give it: `llvmpipe (LLVM 19.1.7, 256 bits) (Vulkan)`.
pub fn describe(info: &wgpu::AdapterInfo) -> String {
    format!("{} ({:?})", info.name, info.backend)
}

/// Checks that an adapter can run the kernels: compute shaders, and the limits of [`NEEDED`].
pub fn check_capabilities(adapter: &str, flags: wgpu::DownlevelFlags, limits: &wgpu::Limits) -> Result<(), WgpuError> {
    if !flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS) {
        return Err(WgpuError::MissingFeature { adapter: adapter.into(), feature: "compute shaders (DownlevelFlags::COMPUTE_SHADERS)".into() });
    }
    for (name, least) in NEEDED {
        let has = limit_of(limits, name);
        if has < least {
            return Err(WgpuError::MissingFeature { adapter: adapter.into(), feature: format!("{name} ≥ {least} (it has {has})") });
        }
    }
    Ok(())
}

/// The adapters `wgpu:N` indexes, in order: discrete, integrated, virtual, other, CPU.
pub fn adapters() -> Vec<wgpu::Adapter> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let mut all = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    if let Ok(want) = std::env::var("RLX_WGPU_ADAPTER") {
        let want = want.to_lowercase();
        all.retain(|a| a.get_info().name.to_lowercase().contains(&want));
    }
    let rank = |t: wgpu::DeviceType| match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    };
    all.sort_by_key(|a| rank(a.get_info().device_type));
    all
}

/// Compiled pipelines and their layouts.
#[derive(Default)]
struct Pipelines {
    by_source: HashMap<String, Arc<wgpu::ComputePipeline>>,
    /// Per (operand bindings, report): the bind group layout and the pipeline layout.
    layouts: HashMap<(usize, bool), (Arc<wgpu::BindGroupLayout>, wgpu::PipelineLayout)>,
}

/// Work recorded but not yet submitted.
#[derive(Default)]
pub(crate) struct Pending {
    encoder: Option<wgpu::CommandEncoder>,
    recorded: usize,
    /// The batch's parameter buffer, and the words its launches bind in it.
    param_buf: Option<wgpu::Buffer>,
    params: Vec<u8>,
}

/// An adapter opened for rlx.
pub struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    /// The adapter's name and API, as errors give it.
    pub(crate) adapter: String,
    pub(crate) limits: wgpu::Limits,
    index: usize,
    /// Tells this opening's memory from others'.
    pub(crate) id: u64,
    pending: Mutex<Pending>,
    pipelines: Mutex<Pipelines>,
    /// wgpu errors no scope caught, returned by the next download or sync.
    fault: Arc<Mutex<Vec<String>>>,
    /// `[flag, value, extent, _]`: the first bad index a kernel met since the last check.
    pub(crate) report: wgpu::Buffer,
    pub(crate) usage: Usage,
}

impl Gpu {
    /// Opens adapter `index` (see the module's docs): a typed error when there is none, or it
    /// lacks what the kernels need, or its device cannot be created; never a panic.
    pub fn open(index: usize) -> Result<Arc<Gpu>, WgpuError> {
        let mut all = adapters();
        if index >= all.len() {
            let found = all.iter().map(|a| describe(&a.get_info())).collect::<Vec<_>>();
            let filter = std::env::var("RLX_WGPU_ADAPTER").map(|f| format!(" named like `{f}` (RLX_WGPU_ADAPTER)")).unwrap_or_default();
            return Err(WgpuError::NoAdapter { index, found: if found.is_empty() { format!("no adapter{filter}") } else { format!("{} adapter(s){filter}: {}", found.len(), found.join(", ")) } });
        }
        let adapter = all.swap_remove(index);
        let name = describe(&adapter.get_info());
        let limits = adapter.limits();
        check_capabilities(&name, adapter.get_downlevel_capabilities().flags, &limits)?;
        let desc = wgpu::DeviceDescriptor { label: Some("rlx"), required_limits: limits.clone(), ..Default::default() };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc)).map_err(|e| WgpuError::Device { adapter: name.clone(), msg: format!("creating the device: {e}") })?;
        let fault: Arc<Mutex<Vec<String>>> = Arc::default();
        let kept = fault.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut f) = kept.lock() {
                f.push(e.to_string());
            }
        }));
        let report = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("rlx report"),
            size: 16,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Ok(Arc::new(Gpu {
            device,
            queue,
            adapter: name,
            limits,
            index,
            id: OPENED.fetch_add(1, Ordering::Relaxed),
            pending: Mutex::default(),
            pipelines: Mutex::default(),
            fault,
            report,
            usage: Usage::default(),
        }))
    }

    /// The adapter's index among [`adapters`].
    pub fn index(&self) -> usize {
        self.index
    }

    /// The adapter's name and API.
    pub fn adapter(&self) -> &str {
        &self.adapter
    }

    /// A wgpu error as the backend's message.
    pub(crate) fn error(&self, msg: impl std::fmt::Display) -> WgpuError {
        WgpuError::Device { adapter: self.adapter.clone(), msg: msg.to_string() }
    }

    /// The pipeline of `kernel`, built on first use: a kernel that does not compile is an
    /// error naming it and the adapter.
    pub(crate) fn pipeline(&self, kernel: &Kernel) -> Result<(Arc<wgpu::ComputePipeline>, Arc<wgpu::BindGroupLayout>), WgpuError> {
        let mut cache = self.pipelines.lock().map_err(|_| self.error("the pipeline cache was poisoned"))?;
        let layout = self.layout(&mut cache, kernel.operands, kernel.report);
        if let Some(p) = cache.by_source.get(&kernel.code) {
            return Ok((p.clone(), layout));
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(kernel.name), source: wgpu::ShaderSource::Wgsl(kernel.code.as_str().into()) });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.name),
            layout: Some(&cache.layouts[&(kernel.operands, kernel.report)].1),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(self.error(format!("the {} kernel does not build: {e}", kernel.name)));
        }
        let pipeline = Arc::new(pipeline);
        cache.by_source.insert(kernel.code.clone(), pipeline.clone());
        Ok((pipeline, layout))
    }

    /// The bind group layout of `operands` read-write storage buffers after the read-only
    /// parameter buffer (the last one an atomic report when `report`).
    fn layout(&self, cache: &mut Pipelines, operands: usize, report: bool) -> Arc<wgpu::BindGroupLayout> {
        let device = &self.device;
        cache
            .layouts
            .entry((operands, report))
            .or_insert_with(|| {
                let entry = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
                    binding,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer { ty: wgpu::BufferBindingType::Storage { read_only }, has_dynamic_offset: false, min_binding_size: None },
                    count: None,
                };
                let entries: Vec<_> = std::iter::once(entry(0, true)).chain((1..=operands as u32).map(|b| entry(b, false))).collect();
                let bgl = Arc::new(device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: None, entries: &entries }));
                let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor { label: None, bind_group_layouts: &[Some(&bgl)], immediate_size: 0 });
                (bgl, pl)
            })
            .0
            .clone()
    }

    /// The encoder of unsubmitted work, to record into.
    pub(crate) fn pending(&self) -> Result<MutexGuard<'_, Pending>, WgpuError> {
        self.pending.lock().map_err(|_| self.error("the command encoder was poisoned"))
    }

    /// Records into the pending encoder, submitting it once it holds [`BATCH`] pieces.
    pub(crate) fn record(&self, f: impl FnOnce(&mut wgpu::CommandEncoder)) -> Result<(), WgpuError> {
        let mut pending = self.pending()?;
        self.record_into(&mut pending, f);
        Ok(())
    }

    /// [`Self::record`] with the pending work already locked.
    fn record_into(&self, pending: &mut Pending, f: impl FnOnce(&mut wgpu::CommandEncoder)) {
        let encoder = pending.encoder.get_or_insert_with(|| self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("rlx") }));
        f(encoder);
        pending.recorded += 1;
        if pending.recorded >= BATCH {
            self.submit(pending);
        }
    }

    /// Records a dispatch of `pipeline` over `groups` workgroups, its parameter words `params`
    /// (binding 0) placed in the batch's parameter buffer beside `operands` (bindings 1..).
    /// One buffer and one queue write serve a batch's launches, not a buffer each.
    pub(crate) fn dispatch(&self, name: &str, pipeline: &wgpu::ComputePipeline, layout: &wgpu::BindGroupLayout, params: &[u8], operands: Vec<wgpu::BindGroupEntry<'_>>, groups: [u32; 3]) -> Result<(), WgpuError> {
        let mut pending = self.pending()?;
        let align = self.limits.min_storage_buffer_offset_alignment.max(4) as usize;
        let mut at = pending.params.len().next_multiple_of(align);
        if at + params.len() > PARAM_BYTES && pending.param_buf.is_some() {
            self.submit(&mut pending);
            at = 0;
        }
        let size = PARAM_BYTES.max(params.len()) as u64;
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let buf = pending.param_buf.get_or_insert_with(|| self.device.create_buffer(&wgpu::BufferDescriptor { label: Some("rlx parameters"), size, usage, mapped_at_creation: false })).clone();
        pending.params.resize(at, 0);
        pending.params.extend_from_slice(params);
        let binding = wgpu::BufferBinding { buffer: &buf, offset: at as u64, size: std::num::NonZeroU64::new(params.len() as u64) };
        let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::Buffer(binding) }];
        entries.extend(operands);
        let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout, entries: &entries });
        self.record_into(&mut pending, |encoder| {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(name), timestamp_writes: None });
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        });
        Ok(())
    }

    /// Submits what is pending, the batch's parameter words written first.
    pub(crate) fn submit(&self, pending: &mut Pending) {
        if let Some(buf) = pending.param_buf.take() {
            self.queue.write_buffer(&buf, 0, &pending.params);
        }
        pending.params.clear();
        if let Some(encoder) = pending.encoder.take() {
            self.queue.submit([encoder.finish()]);
        }
        pending.recorded = 0;
    }

    /// Submits what is pending.
    pub(crate) fn flush(&self) -> Result<(), WgpuError> {
        let mut pending = self.pending()?;
        self.submit(&mut pending);
        Ok(())
    }

    /// Submits what is pending and waits for the queue, then returns any error wgpu raised
    /// outside a scope.
    pub(crate) fn wait(&self) -> Result<(), WgpuError> {
        self.flush()?;
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| self.error(format!("waiting for the queue: {e}")))?;
        self.check_faults()
    }

    /// The errors wgpu raised outside a scope since the last check, as one error.
    pub(crate) fn check_faults(&self) -> Result<(), WgpuError> {
        let mut fault = self.fault.lock().map_err(|_| self.error("the error list was poisoned"))?;
        if fault.is_empty() {
            return Ok(());
        }
        let all = std::mem::take(&mut *fault).join("; ");
        Err(self.error(all))
    }
}
