//! What this CPU is and which kernels rlx runs on it: the processor as CPUID names it, the
//! instruction-set extensions the kernels test for, each kernel family's choice and where the
//! tunable ones came from. `rlx info` prints it; benchmark tables quote it beside their figures.

use std::fmt;

/// The processor and the kernels chosen for it.
#[derive(Clone, Debug)]
pub struct Machine {
    /// CPUID's brand string, or the architecture where there is none.
    pub cpu: String,
    /// CPUID's vendor, family and model (x86), e.g. `AuthenticAMD family 26 model 2`.
    pub id: String,
    /// The extensions present among those the kernels test for.
    pub features: Vec<&'static str>,
    /// Threads the kernels' pool runs.
    pub threads: usize,
    /// `(kernel family, choice)`; a tunable choice says where it came from (`default`, `cache
    /// <file>` or the environment variable).
    pub kernels: Vec<(&'static str, String)>,
    /// The cache file of `rlx tune`'s choices read for this machine, or why none was.
    pub tuned: String,
}

/// This machine, as the kernels see it.
pub fn machine() -> Machine {
    let (cpu, id) = processor();
    let sgemm = crate::kernels::matmul::Choices::get();
    Machine {
        cpu,
        id,
        features: features(),
        threads: rayon::current_num_threads(),
        kernels: vec![
            ("f32 GEMM register tile", sgemm.tile_text()),
            ("f32 GEMM cache blocking", sgemm.blocking_text()),
            ("quantized products (8-bit activation blocks)", crate::kernels::quant::q8_kernels().to_string()),
            ("int8 products (--precision int8)", crate::kernels::matmul::int8::kernel().to_string()),
            ("bf16 products (--precision bf16)", crate::kernels::matmul::bfloat16::kernel().to_string()),
        ],
        tuned: crate::tuned::state().to_string(),
    }
}

/// The key `rlx tune`'s cache file is written under ([`crate::tuned`]): CPUID vendor, family,
/// model and brand, the extensions the kernels test for, and rlx's version, so that a file from
/// another processor or another build of the kernels is never read.
pub fn key() -> String {
    let (cpu, id) = processor();
    format!("{id} | {cpu} | {} | rlx {}", features().join(" "), env!("CARGO_PKG_VERSION"))
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "cpu       {}", self.cpu)?;
        if !self.id.is_empty() {
            writeln!(f, "cpuid     {}", self.id)?;
        }
        writeln!(f, "features  {}", if self.features.is_empty() { "none of those the kernels use".into() } else { self.features.join(" ") })?;
        writeln!(f, "threads   {}", self.threads)?;
        for (family, choice) in &self.kernels {
            writeln!(f, "kernel    {family}: {choice}")?;
        }
        writeln!(f, "tuned     {}", self.tuned)
    }
}

#[cfg(target_arch = "x86_64")]
fn processor() -> (String, String) {
    use std::arch::x86_64::__cpuid;
    let words = |leaf: u32| {
        let r = __cpuid(leaf);
        [r.eax, r.ebx, r.ecx, r.edx]
    };
    let text = |regs: &[u32]| -> String {
        let bytes: Vec<u8> = regs.iter().flat_map(|r| r.to_le_bytes()).collect();
        String::from_utf8_lossy(&bytes).trim_matches(char::from(0)).trim().to_string()
    };
    let top = words(0);
    let vendor = text(&[top[1], top[3], top[2]]);
    let brand = if words(0x8000_0000)[0] >= 0x8000_0004 {
        text(&[words(0x8000_0002), words(0x8000_0003), words(0x8000_0004)].concat())
    } else {
        String::new()
    };
    let sig = words(1)[0];
    let (base_family, base_model) = ((sig >> 8) & 0xf, (sig >> 4) & 0xf);
    let family = if base_family == 0xf { base_family + ((sig >> 20) & 0xff) } else { base_family };
    let model = if base_family == 0x6 || base_family == 0xf { base_model + (((sig >> 16) & 0xf) << 4) } else { base_model };
    let id = format!("{vendor} family {family} model {model} stepping {}", sig & 0xf);
    (if brand.is_empty() { "x86_64".to_string() } else { brand }, id)
}

#[cfg(not(target_arch = "x86_64"))]
fn processor() -> (String, String) {
    (std::env::consts::ARCH.to_string(), String::new())
}

#[cfg(target_arch = "x86_64")]
fn features() -> Vec<&'static str> {
    use std::arch::is_x86_feature_detected as has;
    [
        ("avx2", has!("avx2")),
        ("fma", has!("fma")),
        ("f16c", has!("f16c")),
        ("avx512f", has!("avx512f")),
        ("avx512bw", has!("avx512bw")),
        ("avx512vl", has!("avx512vl")),
        ("avx512vnni", has!("avx512vnni")),
        ("avx512bf16", has!("avx512bf16")),
        ("avxvnni", has!("avxvnni")),
    ]
    .into_iter()
    .filter_map(|(name, present)| present.then_some(name))
    .collect()
}

#[cfg(not(target_arch = "x86_64"))]
fn features() -> Vec<&'static str> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_the_processor_and_the_kernels_the_dispatch_picks() {
        let m = machine();
        assert!(!m.cpu.is_empty());
        assert!(m.threads >= 1);
        let sgemm = crate::kernels::matmul::Choices::get();
        assert_eq!((m.kernels[0].1.clone(), m.kernels[1].1.clone()), (sgemm.tile_text(), sgemm.blocking_text()));
        let text = m.to_string();
        assert!(text.contains(&m.cpu) && text.contains("f32 GEMM register tile") && text.contains("\ntuned     "), "{text}");
        assert!(key().contains(&m.cpu) && key().contains(env!("CARGO_PKG_VERSION")) && !key().contains('\n'));
        #[cfg(target_arch = "x86_64")]
        {
            assert!(m.id.contains("family"), "{}", m.id);
            assert_eq!(m.features.contains(&"avx512f"), std::arch::is_x86_feature_detected!("avx512f"));
            assert_eq!(m.kernels[0].1.starts_with("avx512"), std::arch::is_x86_feature_detected!("avx512f"));
        }
    }
}
