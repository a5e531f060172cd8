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
