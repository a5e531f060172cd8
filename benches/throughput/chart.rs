//! The SVG chart of batch time against round trip.

use crate::processor::Mode;
use crate::row::Row;

pub fn chart(rows: &[Row], scenario: &str, path: &std::path::Path) -> Result<(), String> {
    use plotters::prelude::*;

    let series: Vec<(Mode, Vec<(f64, f64)>)> = Mode::ALL
        .iter()
        .map(|&mode| {
            let mut points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.scenario == scenario && r.mode == mode)
                .map(|r| (r.rtt_ms as f64, r.p(0.5) / 1000.0))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            (mode, points)
        })
        .collect();
    let all = series.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y));
    let (lo, hi) = all.fold((f64::MAX, 0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let (lo, hi) = (
        10f64.powf((lo.max(1e-3)).log10().floor()),
        10f64.powf(hi.max(1e-3).log10().ceil()),
    );

    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "1,000 new records over 4 partitions: batch time vs DynamoDB round trip",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..10.5f64, (lo..hi).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("simulated round trip per DynamoDB request (ms)")
        .y_desc("batch time, p50 (s, log scale)")
        .x_labels(11)
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(|e| e.to_string())?;
    let colors = [
        RED,
        BLUE,
        GREEN,
        MAGENTA,
        RGBColor(0, 150, 150),
        RGBColor(230, 140, 0),
        RGBColor(90, 90, 90),
    ];
    for ((mode, points), color) in series.iter().zip(colors) {
        let style = ShapeStyle::from(&color).stroke_width(2);
        chart
            .draw_series(LineSeries::new(points.iter().copied(), style))
            .map_err(|e| e.to_string())?
            .label(mode.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
            )
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// The SVG bar chart of the hot-account comparison at `rtt_ms`: per mode,
/// the batch time (p50) of 1,000 payments to 200 accounts, to ONE account,
/// and to one account with a transaction per record.
pub fn hot_chart(rows: &[Row], rtt_ms: u64, path: &std::path::Path) -> Result<(), String> {
    use plotters::prelude::*;

    const SCENARIOS: [(&str, &str); 3] = [
        ("new-1000x4p", "200 accounts"),
        ("hot-1000x4p", "one account (merged increments)"),
        (
            "hot-1000x4p-1pertx",
            "one account, one transaction per record",
        ),
    ];
    let modes = [Mode::LockFreePartition, Mode::LockFreeKey];
    let p50 = |scenario: &str, mode: Mode| {
        rows.iter()
            .find(|r| r.scenario == scenario && r.mode == mode && r.rtt_ms == rtt_ms)
            .map(|r| r.p(0.5) / 1000.0)
    };
    let top = SCENARIOS
        .iter()
        .flat_map(|(s, _)| modes.iter().filter_map(|&m| p50(s, m)))
        .fold(0f64, f64::max)
        * 1.15;
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "1,000 new payments over 4 partitions, {rtt_ms} ms round trip (DynamoDB Local)"
            ),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..modes.len() as f64, 0f64..top.max(0.1))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(modes.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let index = x.floor() as usize;
            match (x.fract() - 0.5).abs() < 1e-9 {
                true => modes
                    .get(index)
                    .map_or(String::new(), |m| m.name().to_owned()),
                false => String::new(),
            }
        })
        .y_desc("batch time, p50 (s)")
        .draw()
        .map_err(|e| e.to_string())?;
    let colors = [BLUE, RED, RGBColor(150, 150, 150)];
    for (i, ((scenario, label), color)) in SCENARIOS.iter().zip(colors).enumerate() {
        let bars = modes.iter().enumerate().filter_map(|(m, &mode)| {
            let x = m as f64 + 0.15 + i as f64 * 0.23;
            let y = p50(scenario, mode)?;
            Some(Rectangle::new([(x, 0.0), (x + 0.2, y)], color.filled()))
        });
        chart
            .draw_series(bars)
            .map_err(|e| e.to_string())?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
