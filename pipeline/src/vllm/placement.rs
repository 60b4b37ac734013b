//! Which devices or cores one rank's vLLM server may use: among several processes on a
//! machine each rank serves from its own, as it trains on its own.

use tch::Device;

/// The environment that pins the server of local rank `local_rank` of `local_world` on
/// `device`: on CUDA `CUDA_VISIBLE_DEVICES` = the rank's device (mapped through the
/// launcher's own `CUDA_VISIBLE_DEVICES`, when it set one); on the CPU vLLM's
/// `VLLM_CPU_OMP_THREADS_BIND` = the rank's share of the cores this process may run on (its
/// share of libtorch's threads likewise). Nothing when the variable is already set: the
/// user placed the servers.
pub fn rank_env(device: Device, local_rank: usize, local_world: usize) -> Vec<(String, String)> {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    match device {
        Device::Cuda(i) => {
            let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
            vec![("CUDA_VISIBLE_DEVICES".into(), cuda_device(&visible, i))]
        }
        _ if set("VLLM_CPU_OMP_THREADS_BIND") => Vec::new(),
        _ => {
            let cpus = std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| allowed_cpus(&s))
                .unwrap_or_else(|| {
                    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
                });
            vec![(
                "VLLM_CPU_OMP_THREADS_BIND".into(),
                share(&cpus, local_rank, local_world),
            )]
        }
    }
}

/// Device `i` of this process as the machine numbers it: the i-th entry of the launcher's
/// `CUDA_VISIBLE_DEVICES` when it set one, else `i`.
fn cuda_device(visible: &str, i: usize) -> String {
    visible
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .nth(i)
        .map_or_else(|| i.to_string(), str::to_string)
}

/// The CPUs of `Cpus_allowed_list` in a `/proc/PID/status` text ("0-3,8,10-11").
fn allowed_cpus(status: &str) -> Option<Vec<usize>> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim();
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.trim().parse::<usize>().ok()?..=b.trim().parse().ok()?),
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// Rank `rank`'s equal share of `cpus` (at least one; ranks beyond the cores share them
/// round-robin), as vLLM's list syntax "3,4,5".
fn share(cpus: &[usize], rank: usize, world: usize) -> String {
    let per = (cpus.len() / world.max(1)).max(1);
    (0..per)
        .map(|k| cpus[(rank * per + k) % cpus.len()].to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_rank_gets_its_own_cores_and_devices() {
        let cpus = allowed_cpus("Name:\tx\nCpus_allowed_list:\t0-3,8,10-11\n").unwrap();
        assert_eq!(cpus, vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(share(&cpus, 0, 2), "0,1,2");
        assert_eq!(share(&cpus, 1, 2), "3,8,10");
        // More ranks than cores: one core each, shared round-robin.
        assert_eq!(share(&[0, 1], 2, 3), "0");
        assert_eq!(allowed_cpus("Cpus_allowed_list:\tbad\n"), None);
        assert_eq!(cuda_device("", 3), "3");
        assert_eq!(cuda_device("4, 5,6", 1), "5");
        assert_eq!(cuda_device("4", 2), "2");
    }
}
