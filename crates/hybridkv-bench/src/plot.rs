//! PNG plots of the results, like the paper's figures 15 and 22: for each value mix, three
//! panels (throughput, I/O amplification, CPU per operation) with one group of bars per
//! phase and one bar per engine.
//!
//! Drawn with `plotters`' bitmap backend; text uses DejaVu Sans embedded in the binary
//! (the `dejavu` crate), so no system font or fontconfig is needed.

use crate::engine::EngineKind;
use crate::error::{BenchError, Result};
use crate::record::{self, PhaseRecord};
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The font family the plots use.
const FONT: &str = "sans-serif";

fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
            && plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold()).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(BenchError::Plot {
            path: PathBuf::new(),
            message: "the embedded DejaVu font could not be loaded".into(),
        })
    }
}

fn engine_color(name: &str) -> RGBColor {
    match EngineKind::from_name(name) {
        Some(EngineKind::Hybridkv) => RGBColor(214, 39, 40),
        Some(EngineKind::HybridkvInPlace) => RGBColor(255, 152, 150),
        Some(EngineKind::HybridkvAllLog) => RGBColor(140, 86, 75),
        Some(EngineKind::HybridkvMs) => RGBColor(255, 127, 14),
        Some(EngineKind::HybridkvMl) => RGBColor(227, 119, 194),
        Some(EngineKind::HybridkvKdsep) => RGBColor(148, 103, 189),
        Some(EngineKind::RocksDb) => RGBColor(31, 119, 180),
        Some(EngineKind::BlobDb) => RGBColor(23, 190, 207),
        Some(EngineKind::Fjall) => RGBColor(44, 160, 44),
        Some(EngineKind::FjallKv) => RGBColor(152, 223, 138),
        Some(EngineKind::Harness) => RGBColor(0, 0, 0),
        None => RGBColor(127, 127, 127),
    }
}

/// The file name of the plot of one (label, mix) group: `bench-<label>-<mix>.png`, or
/// `bench-<mix>.png` without a label.
pub fn plot_file_name(label: &str, mix: &str) -> String {
    let clean: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if clean.is_empty() {
        format!("bench-{mix}.png")
    } else {
        format!("bench-{clean}-{mix}.png")
    }
}

/// Groups records by (label, mix): labels in order of first appearance, mixes in the
/// paper's order (S, M, L, SD, MD, LD).
pub fn groups(records: &[PhaseRecord]) -> Vec<((String, String), Vec<PhaseRecord>)> {
    let mut out: Vec<((String, String), Vec<PhaseRecord>)> = Vec::new();
    let mut labels: Vec<String> = Vec::new();
    for r in record::latest(records) {
        if !labels.contains(&r.label) {
            labels.push(r.label.clone());
        }
        let key = (r.label.clone(), r.mix.clone());
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => out.push((key, vec![r])),
        }
    }
    let mix_pos = |m: &str| {
        hybridkv_ycsb::ValueMix::ALL
            .iter()
            .position(|x| x.name() == m)
            .unwrap_or(usize::MAX)
    };
    out.sort_by_key(|((label, mix), _)| {
        (
            labels.iter().position(|l| l == label).unwrap_or(usize::MAX),
            mix_pos(mix),
        )
    });
    out
}

/// Draws one PNG per (label, mix) of `records` into `out_dir`; returns the files written.
pub fn plot_all(records: &[PhaseRecord], out_dir: &Path) -> Result<Vec<PathBuf>> {
    register_font()?;
    std::fs::create_dir_all(out_dir).map_err(|e| BenchError::io("create", out_dir, e))?;
    let mut written = Vec::new();
    for ((label, mix), rs) in groups(records) {
        let path = out_dir.join(plot_file_name(&label, &mix));
        plot_group(&label, &mix, &rs, &path)?;
        written.push(path);
    }
    Ok(written)
}

type Metric = (&'static str, fn(&PhaseRecord) -> Option<f64>);

const METRICS: [Metric; 3] = [
    ("Throughput (Kops/s, higher is better)", |r| {
        Some(r.throughput_kops)
    }),
    (
        "I/O amplification (device / application bytes, lower is better)",
        |r| r.io_amplification,
    ),
    ("CPU per operation (microseconds, lower is better)", |r| {
        Some(r.cpu_us_per_op)
    }),
];

fn plot_group(label: &str, mix: &str, records: &[PhaseRecord], path: &Path) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| BenchError::Plot {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    // Phases in order (Load first, then Run A..F), engines in report order.
    let mut phases: Vec<(std::cmp::Reverse<bool>, String, String)> = Vec::new();
    for r in records {
        let key = (
            std::cmp::Reverse(r.phase == "load"),
            r.workload.to_lowercase(),
            r.phase_label(),
        );
        if !phases.contains(&key) {
            phases.push(key);
        }
    }
    phases.sort();
    let phase_labels: Vec<String> = phases.into_iter().map(|(_, _, l)| l).collect();
    let mut engines: Vec<String> = records.iter().map(|r| r.engine.clone()).collect();
    engines.sort_by_key(|e| {
        EngineKind::from_name(e).map_or(usize::MAX, |k| {
            EngineKind::ALL
                .iter()
                .position(|&x| x == k)
                .unwrap_or(usize::MAX)
        })
    });
    engines.dedup();
    let find = |phase: &str, engine: &str| {
        records
            .iter()
            .find(|r| r.phase_label() == phase && r.engine == engine)
    };

    // Bar positions: each phase gets one slot per engine that ran it, then an empty slot.
    let mut bars_at: Vec<(i32, usize, String)> = Vec::new(); // (slot, phase index, engine)
    let mut unit_labels: Vec<String> = Vec::new();
    for (g, phase) in phase_labels.iter().enumerate() {
        let present: Vec<&String> = engines
            .iter()
            .filter(|e| find(phase, e).is_some())
            .collect();
        let first = unit_labels.len();
        for e in &present {
            bars_at.push((unit_labels.len() as i32, g, (*e).clone()));
            unit_labels.push(String::new());
        }
        if let Some(l) = unit_labels.get_mut(first + present.len() / 2) {
            l.clone_from(phase);
        } else if let Some(l) = unit_labels.get_mut(first) {
            l.clone_from(phase);
        }
        if g + 1 < phase_labels.len() {
            unit_labels.push(String::new());
        }
    }
    let total = i32::try_from(unit_labels.len().max(1)).map_err(|e| err(&e))?;
    let width = (180 + unit_labels.len() * 34).clamp(900, 2400) as u32;
    let root = BitMapBackend::new(path, (width, 1300)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let records_n = records
        .iter()
        .filter(|r| r.phase == "load")
        .map(|r| r.records_after)
        .max()
        .or_else(|| records.iter().map(|r| r.records_before).max());
    let title = format!(
        "hybridkv bench: mix {mix}{}{}",
        if label.is_empty() {
            String::new()
        } else {
            format!(", {label}")
        },
        records_n.map_or(String::new(), |n| format!(", {n} records"))
    );
    let (top, body) = root.split_vertically(50);
    top.titled(&title, (FONT, 26).into_font().style(FontStyle::Bold))
        .map_err(|e| err(&e))?;
    let panels = body.split_evenly((3, 1));
    for (panel_index, (panel, (title, metric))) in panels.iter().zip(METRICS).enumerate() {
        let values: Vec<f64> = records
            .iter()
            .filter_map(metric)
            .filter(|v| v.is_finite())
            .collect();
        let ymax = values.iter().copied().fold(0.0f64, f64::max).max(1e-9) * 1.18;
        let mut chart = ChartBuilder::on(panel)
            .caption(title, (FONT, 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d((0..total).into_segmented(), 0f64..ymax)
            .map_err(|e| err(&e))?;
        let labels = unit_labels.clone();
        let fmt_x = move |v: &SegmentValue<i32>| match v {
            SegmentValue::CenterOf(u) => labels.get(*u as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_max_light_lines(2)
            .x_labels(usize::try_from(total).unwrap_or(0))
            .x_label_formatter(&fmt_x)
            .x_label_style((FONT, 16))
            .y_label_style((FONT, 14))
            .draw()
            .map_err(|e| err(&e))?;
        for engine in &engines {
            let color = engine_color(engine);
            let bars: Vec<(i32, f64)> = bars_at
                .iter()
                .filter(|(_, _, e)| e == engine)
                .filter_map(|(u, g, e)| {
                    let v = find(phase_labels.get(*g)?, e).and_then(metric)?;
                    v.is_finite().then_some((*u, v))
                })
                .collect();
            let series = chart
                .draw_series(bars.iter().map(|&(u, v)| {
                    let mut rect = Rectangle::new(
                        [
                            (SegmentValue::Exact(u), 0.0),
                            (SegmentValue::Exact(u + 1), v),
                        ],
                        color.filled(),
                    );
                    rect.set_margin(0, 0, 2, 2);
                    rect
                }))
                .map_err(|e| err(&e))?;
            if panel_index == 0 {
                series.label(engine.as_str()).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled())
                });
            }
            chart
                .draw_series(bars.iter().map(|&(u, v)| {
                    Text::new(
                        short(v),
                        (SegmentValue::Exact(u), v + ymax * 0.01),
                        (FONT, 11).into_font().color(&BLACK),
                    )
                }))
                .map_err(|e| err(&e))?;
        }
        if panel_index == 0 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font((FONT, 15))
                .draw()
                .map_err(|e| err(&e))?;
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// A value in three significant figures or so.
fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
