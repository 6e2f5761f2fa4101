//! The restart schedule: what the file holds, when the engine will first poll
//! each task after a start, and how busy a window of polls is.

use super::Options;
use super::procs::Sampled;
use super::report::Report;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// First polls after a restart may exceed the schedule's prediction in any
/// window by this factor, plus [`NOISE_SIGMAS`] standard deviations of a
/// Poisson count and one poll for an operator retry: the samples are 50 ms
/// apart, and polls leave a little after they are due (more so when the
/// machine is busy).
pub(super) const PREDICTION_SLACK: f64 = 1.25;
pub(super) const NOISE_SIGMAS: f64 = 4.0;

/// The highest rate over any `window` in `samples` (time since start, a
/// monotonic counter). Windows shorter than `window` (at the end) are not
/// counted; `None` if the samples span less than one window.
pub(super) fn max_window_rate(samples: &[(Duration, u64)], window: Duration) -> Option<f64> {
    let mut best: Option<f64> = None;
    let mut j = 0;
    for i in 0..samples.len() {
        let (ti, hi) = samples[i];
        if ti < window {
            continue;
        }
        // Latest sample at least `window` before sample i.
        while j + 1 < i && samples[j + 1].0 + window <= ti {
            j += 1;
        }
        let (tj, hj) = samples[j];
        if tj + window > ti {
            continue;
        }
        let dt = (ti - tj).as_secs_f64();
        let rate = hi.saturating_sub(hj) as f64 / dt;
        best = Some(best.map_or(rate, |b: f64| b.max(rate)));
    }
    best
}

/// The most of `times` (sorted) that fall in any half-open `window`.
pub(super) fn max_in_window(times: &[Duration], window: Duration) -> usize {
    let mut most = 0;
    let mut j = 0;
    for i in 0..times.len() {
        while times[i] - times[j] >= window {
            j += 1;
        }
        most = most.max(i - j + 1);
    }
    most
}

/// When the engine first polls each task after a start, by its documented
/// rule (SPEC §2, docs/DESIGN.md): a task whose stored next run is still
/// ahead keeps it; an overdue one is placed at `start + offset`, its phase
/// offset in [0, interval / 2). `stored` is each task's stored next run
/// (Unix ms; `None` if the task is disabled, so never polled), `offsets` the
/// tasks' phase offsets, `spawn_ms` when the process was started (Unix ms)
/// and `start` when the engine placed its tasks, after `spawn_ms`. Times
/// are since `spawn_ms`.
pub(super) fn predicted_first_polls(
    stored: &[Option<u64>],
    offsets: &[Duration],
    spawn_ms: u64,
    start: Duration,
) -> Vec<Duration> {
    let mut out: Vec<Duration> = stored
        .iter()
        .zip(offsets)
        .filter_map(|(next, offset)| first_poll_at(*next, *offset, spawn_ms, start))
        .collect();
    out.sort();
    out
}

/// [`predicted_first_polls`] for one task.
fn first_poll_at(stored: Option<u64>, offset: Duration, spawn_ms: u64, start: Duration) -> Option<Duration> {
    let next = stored?;
    let start_ms = spawn_ms + start.as_millis() as u64;
    Some(if next < start_ms {
        start + offset
    } else {
        Duration::from_millis(next - spawn_ms)
    })
}

/// The most first polls one window may hold when the schedule predicts
/// `predicted` in its busiest window.
pub(super) fn allowed_first_polls(predicted: usize) -> usize {
    let p = predicted as f64;
    (PREDICTION_SLACK * p + NOISE_SIGMAS * p.sqrt()).ceil() as usize + 1
}

/// One server run, from its start to the kill, against the schedule the file
/// held when it started (`stored`, `spawn_ms`); `ready` is when its API
/// answered, since the start.
pub(super) fn check_run(
    opts: &Options,
    sampled: &Sampled,
    stored: &[Option<u64>],
    offsets: &[Duration],
    spawn_ms: u64,
    ready: Duration,
    report: &mut Report,
) {
    let Some(&(last, _)) = sampled.totals.last() else {
        return;
    };
    let end = last.min(ready + opts.observe);
    if end < opts.window {
        return;
    }
    // The busiest window of first polls, seen and predicted. The engine
    // placed its tasks somewhere between the start and ready: take the
    // busiest prediction for a start anywhere in there (every 50 ms).
    let mut seen: Vec<Duration> = sampled.first.iter().flatten().copied().filter(|t| *t <= end).collect();
    seen.sort();
    let seen_max = max_in_window(&seen, opts.window);
    let starts = (0..=ready.as_millis() / 50)
        .map(|i| Duration::from_millis(i as u64 * 50))
        .chain([ready]);
    let predicted_max = starts
        .map(|start| {
            let p = predicted_first_polls(stored, offsets, spawn_ms, start);
            let p: Vec<Duration> = p.into_iter().filter(|t| *t <= end).collect();
            max_in_window(&p, opts.window)
        })
        .max()
        .unwrap_or(0);
    let allowed = allowed_first_polls(predicted_max);
    report.rate_checks += 1;
    let ratio = seen_max as f64 / predicted_max.max(1) as f64;
    report.first_poll_ratios.push(ratio);
    report.max_first_poll_ratio = report.max_first_poll_ratio.max(ratio);
    report.max_of_allowed = report.max_of_allowed.max(seen_max as f64 / allowed as f64);
    if seen_max > allowed {
        report.violations.push(format!(
            "kill {}: burst after the restart before it: {seen_max} first polls in {} ms, \
             the stored schedule predicts at most {predicted_max} (allowed {allowed})",
            report.kills,
            opts.window.as_millis()
        ));
    }

    // Polling resumed: every task the schedule says was due by half a
    // second before the end (placed at ready, the latest start) was polled.
    let cutoff = end.saturating_sub(Duration::from_millis(500));
    let mut due_count = 0;
    let mut unpolled = 0;
    for (i, (next, offset)) in stored.iter().zip(offsets).enumerate() {
        if first_poll_at(*next, *offset, spawn_ms, ready).is_some_and(|t| t <= cutoff) {
            due_count += 1;
            if sampled.first.get(i).is_none_or(|f| f.is_none()) {
                unpolled += 1;
            }
        }
    }
    report.resume_checked += due_count;
    report.resume_unpolled += unpolled;
    if unpolled > due_count / 100 + 2 {
        report.violations.push(format!(
            "kill {}: polling did not resume after the restart before it: {unpolled} of {due_count} due tasks not polled",
            report.kills
        ));
    }
    if let Some(first) = seen.first() {
        report.max_first_poll = report.max_first_poll.max(first.saturating_sub(ready));
    }

    // The fleet's total rate, for the report: ÷ the steady average and peak.
    let totals: Vec<(Duration, u64)> = sampled.totals.iter().copied().filter(|(t, _)| *t <= end).collect();
    if let Some(max) = max_window_rate(&totals, opts.window) {
        report.max_ratio = report.max_ratio.max(max / report.peak_before_rps.max(1.0));
        report.ratios.push(max / report.peak_before_rps.max(1.0));
        report.max_rate_rps = report.max_rate_rps.max(max);
    }
}

/// Appends one server run's totals to `rates.csv` in the work directory
/// (kill, ms since the process started, ms of ready, fleet requests).
pub(super) fn record_samples(dir: &Path, kill: usize, ready: Duration, samples: &[(Duration, u64)]) {
    let Ok(mut f) = File::options().create(true).append(true).open(dir.join("rates.csv")) else {
        return;
    };
    for (t, h) in samples {
        let _ = writeln!(f, "{kill},{},{},{h}", t.as_millis(), ready.as_millis());
    }
}

/// Every task's stored next run (Unix ms; `None` if disabled), in fleet
/// order, read from the file while no server runs. The file must open and
/// every record must decode.
pub(super) fn stored_schedule(data: &Path, names: &[String]) -> Result<Vec<Option<u64>>, String> {
    let store = pollster::store::Store::open(data).map_err(|e| format!("the database does not open: {e}"))?;
    let (tasks, corrupt) = store.load_tasks().map_err(|e| format!("cannot read task state: {e}"))?;
    if let Some(c) = corrupt.first() {
        return Err(format!("{} unreadable task record(s), first: {c}", corrupt.len()));
    }
    let by_instance: HashMap<&str, &pollster::model::TaskRecord> =
        tasks.iter().map(|(k, r)| (&*k.instance, r)).collect();
    Ok(names
        .iter()
        .map(|n| match by_instance.get(n.as_str()) {
            Some(r) if r.disabled => None,
            Some(r) => Some(r.next_run.0),
            // Never stored: placed at its offset like an overdue one.
            None => Some(0),
        })
        .collect())
}

pub(super) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_rate() {
        let s: Vec<(Duration, u64)> = (0..=20).map(|i| (Duration::from_millis(i * 100), i * 10)).collect();
        let r = max_window_rate(&s, Duration::from_millis(500)).expect("rate");
        assert!((r - 100.0).abs() < 1e-9, "{r}");
        let mut b = s.clone();
        for x in b.iter_mut().skip(10) {
            x.1 += 200;
        }
        let r = max_window_rate(&b, Duration::from_millis(500)).expect("rate");
        assert!((r - 500.0).abs() < 1e-9, "{r}");
        assert_eq!(max_window_rate(&s[..3], Duration::from_millis(500)), None);
    }

    #[test]
    fn busiest_window() {
        let ms = |v: &[u64]| v.iter().map(|m| Duration::from_millis(*m)).collect::<Vec<_>>();
        assert_eq!(max_in_window(&[], Duration::from_millis(500)), 0);
        assert_eq!(
            max_in_window(&ms(&[0, 100, 499, 500, 900]), Duration::from_millis(500)),
            3
        );
        assert_eq!(max_in_window(&ms(&[0, 600, 1200]), Duration::from_millis(500)), 1);
    }

    #[test]
    fn the_prediction_keeps_times_ahead_and_places_overdue_tasks_at_their_offset() {
        let spawn = 1_000_000;
        let stored = [Some(spawn + 3_000), Some(spawn - 5_000), None, Some(spawn + 200)];
        let offsets = [
            Duration::from_millis(10),
            Duration::from_millis(1_500),
            Duration::ZERO,
            Duration::from_millis(700),
        ];
        let ms = Duration::from_millis;
        // The engine placed its tasks 300 ms after the start: the last task
        // (due at 200 ms) was overdue by then; the disabled one never polls.
        assert_eq!(
            predicted_first_polls(&stored, &offsets, spawn, ms(300)),
            vec![ms(1_000), ms(1_800), ms(3_000)]
        );
        assert_eq!(
            predicted_first_polls(&stored, &offsets, spawn, Duration::ZERO),
            vec![ms(200), ms(1_500), ms(3_000)]
        );
        assert_eq!(allowed_first_polls(0), 1);
        assert_eq!(allowed_first_polls(100), 166);
    }
}
