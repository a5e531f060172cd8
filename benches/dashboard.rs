//! A picture of the operations dashboard for the README: `cargo bench
//! --bench dashboard` writes `docs/dashboard.svg`.
//!
//! The nine panels mirror the widgets of `template.yaml`'s
//! `OperationsDashboard` (same titles, same metrics, same order; the
//! dead-letter queue panel exists with `OnFailureDestination=sqs` only), so
//! that operators know what normal looks like before they need to.
//!
//! The data is SAMPLE data, not a measurement: a synthetic but realistic
//! 3-hour morning (09:00 to 12:00) at 1-minute resolution, deterministic (a
//! seeded xorshift generator written below, so the picture only changes when
//! this file does). About 1,800 records a minute on the locking path, with
//! two events an operator should recognise:
//!
//! - 10:20, a crashed invocation and the rebalance after it: processing
//!   slows, then stops, for five minutes in all (the minutes without store
//!   requests have no latency or round-trip data points; the lines are drawn
//!   across them, as CloudWatch draws them); the offset lag climbs to about
//!   8,000 and drains within ten minutes; the 10:25 stuck-key check finds
//!   the oldest STARTED key older than usual (the dead worker's, 130 s); the
//!   new owner meets keys still locked (`InProgress`), takes over the dead
//!   worker's locks once their lease ends (`TakenOver`) and sees about 600
//!   redelivered records that were already done (`Duplicate`).
//! - 11:15, a short network blip: a few `Retrying` records, one or two
//!   `StoreError`s, one failed invocation (`Errors`) and a small p99 bump;
//!   all retried, nothing lost.
//!
//! Everything else (`FailedClosed`, `UnrecordedEffects`, `LockLost`,
//! `StuckKeys`, `Throttles`, the dead-letter queue) stays at 0.

use std::error::Error;
use std::path::Path;

use plotters::chart::SeriesAnno;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

/// Minutes in the sample (09:00 to 12:00, both ends included).
const MINUTES: usize = 181;
/// When the rebalance and the network blip happen (minutes after 09:00).
const REBALANCE: usize = 80;
const BLIP: usize = 135;
/// The template's defaults: `StoreLatencyP99AlarmMs`, `StuckKeyAgeAlarmSeconds`.
const STORE_LATENCY_P99_ALARM_MS: f64 = 200.0;
const STUCK_KEY_AGE_ALARM_SECONDS: f64 = 1800.0;

/// CloudWatch's default line colors, in the order it gives them out.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];
/// The horizontal annotations (alarm thresholds).
const THRESHOLD: RGBColor = RGBColor(200, 30, 30);

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/dashboard.svg");
    std::fs::create_dir_all(path.parent().expect("docs/")).expect("docs directory");
    draw(&panels(&Day::sample()), &path).expect("dashboard");
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    println!("wrote {} ({} KB)", path.display(), bytes.div_ceil(1024));
}

/// A tiny seeded generator (xorshift64), so that the sample is the same on
/// every run without a crate for it.
struct Rng(u64);

impl Rng {
    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Roughly normal, mean 0, standard deviation 1 (Irwin-Hall of 4).
    fn noise(&mut self) -> f64 {
        ((0..4).map(|_| self.uniform()).sum::<f64>() - 2.0) * 3f64.sqrt()
    }

    /// 1 with probability `p`, else 0.
    fn chance(&mut self, p: f64) -> f64 {
        f64::from(u8::from(self.uniform() < p))
    }
}

/// One value a minute per metric; the `(minute, value)` ones have gaps (the
/// stuck-key check runs every 5 minutes; no store requests, no latency).
#[derive(Default)]
struct Day {
    processed: Vec<f64>,
    duplicate: Vec<f64>,
    rejected: Vec<f64>,
    failed: Vec<f64>,
    previously_failed: Vec<f64>,
    in_progress: Vec<f64>,
    timed_out: Vec<f64>,
    retrying: Vec<f64>,
    latency_p50: Vec<(f64, f64)>,
    latency_p99: Vec<(f64, f64)>,
    requests_per_record: Vec<(f64, f64)>,
    taken_over: Vec<f64>,
    lock_lost: Vec<f64>,
    failed_closed: Vec<f64>,
    unrecorded_effects: Vec<f64>,
    store_error: Vec<f64>,
    oldest_started_age: Vec<(f64, f64)>,
    stuck_keys: Vec<(f64, f64)>,
    offset_lag: Vec<f64>,
    errors: Vec<f64>,
    throttles: Vec<f64>,
    dead_letters: Vec<f64>,
}

impl Day {
    fn sample() -> Day {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut day = Day::default();
        let mut lag = 0.0;
        for t in 0..MINUTES {
            let wave = 1700.0 + 200.0 * (std::f64::consts::PI * t as f64 / 240.0).sin();
            let arriving = (wave + 35.0 * rng.noise()).round();
            let after = t.wrapping_sub(REBALANCE);
            let blip = t.wrapping_sub(BLIP) < 3;
            // The crash and rebalance: the crashed invocation's partitions
            // stop, then all of them during the rebalance, for five minutes
            // in all; then the backlog drains over ten (about 750 a minute
            // on top of the arrivals).
            let drained = match after {
                0..=4 => (arriving * [0.1, 0.0, 0.0, 0.2, 0.4][after]).round(),
                5..=14 => arriving + (lag / (15 - after) as f64).round(),
                _ => arriving,
            };
            let working = f64::from(u8::from(drained > 0.0));
            lag = (lag + arriving - drained).max(0.0);
            let processed = drained;
            let duplicate = (processed * (0.02 + 0.003 * rng.noise())).round()
                + if after == 5 { 600.0 } else { 0.0 };
            let rejected = rng.chance(0.1) * working;
            let failed = rng.chance(0.05) * (1.0 + rng.chance(0.3)) * working;
            let previously_failed = if after == 5 { 1.0 } else { 0.0 };
            let in_progress = burst(&[12.0, 25.0, 6.0], after.wrapping_sub(4));
            let taken_over = burst(&[20.0, 4.0], after.wrapping_sub(5));
            let retrying = burst(&[3.0, 7.0, 2.0], t.wrapping_sub(BLIP));
            let store_error = burst(&[1.0, 2.0], t.wrapping_sub(BLIP));
            // Store requests: claim + complete for a new record, one claim
            // for a duplicate or a locked key, one more for a takeover, a
            // retry for a store error.
            let records = processed + duplicate + rejected + failed + previously_failed;
            let records = records + in_progress + retrying + store_error;
            let requests = 2.0 * (processed + failed + rejected)
                + duplicate
                + previously_failed
                + in_progress
                + taken_over
                + retrying
                + 2.0 * store_error;
            day.processed.push(processed);
            day.duplicate.push(duplicate);
            day.rejected.push(rejected);
            day.failed.push(failed);
            day.previously_failed.push(previously_failed);
            day.in_progress.push(in_progress);
            day.timed_out.push(0.0);
            day.retrying.push(retrying);
            // No store requests, no latency and no ratio: a gap that
            // CloudWatch draws over.
            let (p50, p99) = (5.0 + 0.28 * rng.noise(), 19.0 + 1.7 * rng.noise());
            if working > 0.0 {
                let p99 = p99 + if blip { 18.0 } else { 0.0 };
                day.latency_p50.push((t as f64, p50));
                day.latency_p99.push((t as f64, p99));
                let ratio = requests / records + 0.008 * rng.noise();
                day.requests_per_record.push((t as f64, ratio));
            }
            day.taken_over.push(taken_over);
            day.lock_lost.push(0.0);
            day.failed_closed.push(0.0);
            day.unrecorded_effects.push(0.0);
            day.store_error.push(store_error);
            if t % 5 == 0 {
                // The oldest STARTED key: a record in flight, seconds old;
                // after the crash, the dead worker's key, until the
                // redelivery takes it over.
                let age = match after {
                    0 => 55.0,
                    5 => 130.0,
                    _ => (5.0 + 35.0 * rng.uniform()).round(),
                };
                day.oldest_started_age.push((t as f64, age));
                day.stuck_keys.push((t as f64, 0.0));
            }
            let background = (100.0 + 50.0 * rng.noise()).clamp(0.0, 200.0);
            day.offset_lag.push(lag + background.round());
            day.errors.push(if t == BLIP + 1 { 1.0 } else { 0.0 });
            day.throttles.push(0.0);
            day.dead_letters.push(0.0);
        }
        day
    }
}

/// `values[i]`, or 0 outside the burst.
fn burst(values: &[f64], i: usize) -> f64 {
    values.get(i).copied().unwrap_or(0.0)
}

/// One line of a panel.
struct Line {
    label: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
    dashed: bool,
}

impl Line {
    fn new(label: &str, color: RGBColor, values: &[f64]) -> Line {
        let points = values.iter().enumerate().map(|(t, &v)| (t as f64, v));
        Line::points(label, color, points.collect())
    }

    fn points(label: &str, color: RGBColor, points: Vec<(f64, f64)>) -> Line {
        let label = label.to_owned();
        Line {
            label,
            color,
            points,
            dashed: false,
        }
    }

    /// A horizontal annotation (an alarm's threshold), dashed.
    fn threshold(label: &str, value: f64) -> Line {
        let points = vec![(0.0, value), ((MINUTES - 1) as f64, value)];
        Line {
            dashed: true,
            ..Line::points(label, THRESHOLD, points)
        }
    }
}

/// A y axis: linear from 0, or log10 from 1 (drawn as log10 of the values
/// on a linear axis, so that every panel has the same coordinate type).
struct Axis {
    max: f64,
    /// How many labels (and grid lines): 0 to `max` in steps of 1, 2 or 5
    /// times a power of 10, as plotters places them.
    labels: usize,
    log: bool,
}

impl Axis {
    fn linear(max: f64, step: f64) -> Axis {
        let labels = (max / step).round() as usize + 1;
        Axis {
            max,
            labels,
            log: false,
        }
    }

    fn log(decades: u32) -> Axis {
        Axis {
            max: f64::from(decades),
            labels: decades as usize + 1,
            log: true,
        }
    }

    fn map(&self, y: f64) -> f64 {
        match self.log {
            true => y.max(1.0).log10(),
            false => y,
        }
    }

    fn label(&self, y: f64) -> String {
        let y = if self.log { 10f64.powf(y) } else { y };
        match y {
            y if y >= 10_000.0 && y % 1000.0 == 0.0 => format!("{}k", y / 1000.0),
            y if y >= 1000.0 && y % 1.0 == 0.0 => {
                format!("{},{:03}", (y / 1000.0).floor(), y % 1000.0)
            }
            y if y % 1.0 == 0.0 => format!("{y}"),
            y => format!("{y:.1}"),
        }
    }
}

/// One widget of the dashboard.
struct Panel {
    title: &'static str,
    axis: Axis,
    lines: Vec<Line>,
    /// CloudWatch's `"stacked": true`: each line on top of the ones before.
    stacked: bool,
    /// Lines on the right axis (`"yAxis": "right"`), linear.
    right: Option<(Axis, Vec<Line>)>,
}

impl Panel {
    fn new(title: &'static str, axis: Axis, lines: Vec<Line>) -> Panel {
        Panel {
            title,
            axis,
            lines,
            stacked: false,
            right: None,
        }
    }
}

/// The panels of `template.yaml`'s `OperationsDashboard`, in its order.
fn panels(day: &Day) -> Vec<Panel> {
    let c = PALETTE;
    vec![
        Panel {
            stacked: true,
            ..Panel::new(
                "Outcomes per minute",
                Axis::linear(5000.0, 1000.0),
                vec![
                    Line::new("Processed", c[0], &day.processed),
                    Line::new("Duplicate", c[1], &day.duplicate),
                    Line::new("Rejected", c[2], &day.rejected),
                    Line::new("Failed", c[3], &day.failed),
                    Line::new("PreviouslyFailed", c[4], &day.previously_failed),
                    Line::new("InProgress", c[5], &day.in_progress),
                    Line::new("TimedOut", c[6], &day.timed_out),
                    Line::new("Retrying", c[7], &day.retrying),
                ],
            )
        },
        Panel::new(
            "Store latency (ms)",
            Axis::log(3),
            vec![
                Line::points("p50", c[0], day.latency_p50.clone()),
                Line::points("p99", c[1], day.latency_p99.clone()),
                Line::threshold("StoreLatencyAlarm", STORE_LATENCY_P99_ALARM_MS),
            ],
        ),
        Panel::new(
            "Store round trips per record",
            Axis::linear(3.0, 0.5),
            vec![Line::points(
                "store requests per record (locking path ≈ 2, lock-free < 1)",
                c[0],
                day.requests_per_record.clone(),
            )],
        ),
        Panel::new(
            "Takeovers and lost locks",
            Axis::linear(30.0, 10.0),
            vec![
                Line::new("TakenOver", c[0], &day.taken_over),
                Line::new("LockLost", c[1], &day.lock_lost),
            ],
        ),
        Panel::new(
            "Failing closed and unrecorded effects",
            Axis::linear(5.0, 1.0),
            vec![
                Line::new("FailedClosed", c[0], &day.failed_closed),
                Line::new("UnrecordedEffects", c[1], &day.unrecorded_effects),
                Line::new("StoreError", c[2], &day.store_error),
            ],
        ),
        Panel {
            right: Some((
                Axis::linear(5.0, 1.0),
                vec![Line::points(
                    "stuck keys (right)",
                    c[1],
                    day.stuck_keys.clone(),
                )],
            )),
            ..Panel::new(
                "Stuck keys",
                Axis::log(5),
                vec![
                    Line::points(
                        "oldest STARTED key (s)",
                        c[0],
                        day.oldest_started_age.clone(),
                    ),
                    Line::threshold("StuckKeysAlarm", STUCK_KEY_AGE_ALARM_SECONDS),
                ],
            )
        },
        Panel::new(
            "Offset lag",
            Axis::linear(10_000.0, 2000.0),
            vec![Line::new("OffsetLag", c[0], &day.offset_lag)],
        ),
        Panel::new(
            "Errors and throttles",
            Axis::linear(5.0, 1.0),
            vec![
                Line::new("Errors", c[0], &day.errors),
                Line::new("Throttles", c[1], &day.throttles),
            ],
        ),
        Panel::new(
            "Dead-letter queue depth",
            Axis::linear(5.0, 1.0),
            vec![Line::new(
                "ApproximateNumberOfMessagesVisible",
                c[0],
                &day.dead_letters,
            )],
        ),
    ]
}

fn draw(panels: &[Panel], path: &Path) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::new(path, (1500, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "Operations dashboard (template.yaml OperationsDashboard), SAMPLE data: a synthetic morning, 1-minute periods",
        ("sans-serif", 24),
    )?;
    for (area, panel) in root.split_evenly((3, 3)).iter().zip(panels) {
        draw_panel(area, panel)?;
    }
    root.present()?;
    Ok(())
}

/// Right axis labels' width; panels without a right axis get it as margin,
/// so that every panel's plot has the same width.
const RIGHT_AXIS: u32 = 28;
/// The font size of tick labels and legends.
const SMALL: u32 = 13;
/// The x axis: half hours after 09:00, so that plotters labels every half
/// hour.
const HALF_HOURS: f64 = (MINUTES - 1) as f64 / 30.0;

fn x(minute: f64) -> f64 {
    minute / 30.0
}

fn time(x: &f64) -> String {
    let minutes = (x * 30.0).round() as u32;
    format!("{:02}:{:02}", 9 + minutes / 60, minutes % 60)
}

type Plane = Cartesian2d<RangedCoordf64, RangedCoordf64>;

fn draw_panel(area: &DrawingArea<SVGBackend, Shift>, panel: &Panel) -> Result<(), Box<dyn Error>> {
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(panel.title, ("sans-serif", 18))
        .margin(8)
        .x_label_area_size(24)
        .y_label_area_size(46);
    match panel.right {
        Some(_) => builder.right_y_label_area_size(RIGHT_AXIS),
        None => builder.margin_right(8 + RIGHT_AXIS),
    };
    let chart = builder.build_cartesian_2d(0.0..HALF_HOURS, 0.0..panel.axis.max)?;
    match &panel.right {
        None => {
            let mut chart = chart;
            draw_left(&mut chart, panel)?;
            draw_legend(&mut chart)
        }
        // The secondary coordinate first: it takes the right label area
        // away from the primary mesh, which would label it too.
        Some((right, lines)) => {
            let mut chart = chart.set_secondary_coord(0.0..HALF_HOURS, 0.0..right.max);
            draw_left(&mut chart, panel)?;
            chart
                .configure_secondary_axes()
                .y_labels(right.labels)
                .axis_style(BLACK.mix(0.4))
                .label_style(("sans-serif", SMALL))
                .y_label_formatter(&|y| right.label(*y))
                .draw()?;
            for line in lines {
                let style = ShapeStyle::from(&line.color).stroke_width(1);
                let points = line.points.iter().map(|&(t, y)| (x(t), y));
                let series = chart.draw_secondary_series(LineSeries::new(points, style))?;
                legend(series, line);
            }
            draw_legend(&mut chart)
        }
    }
}

/// The grid, the axes and the lines of the left axis.
fn draw_left<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Plane>,
    panel: &Panel,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let axis = &panel.axis;
    chart
        .configure_mesh()
        .x_labels(HALF_HOURS as usize + 1)
        .y_labels(axis.labels)
        .max_light_lines(0)
        .bold_line_style(BLACK.mix(0.1))
        .axis_style(BLACK.mix(0.4))
        .label_style(("sans-serif", SMALL))
        .x_label_formatter(&time)
        .y_label_formatter(&|y| axis.label(*y))
        .draw()?;
    let mut below = vec![0.0; MINUTES];
    for line in &panel.lines {
        let points: Vec<(f64, f64)> = line
            .points
            .iter()
            .map(|&(t, y)| (x(t), axis.map(y)))
            .collect();
        let style = ShapeStyle::from(&line.color).stroke_width(1);
        let series = match (panel.stacked, line.dashed) {
            (true, _) => {
                let top: Vec<(f64, f64)> = points
                    .iter()
                    .zip(&below)
                    .map(|(&(t, y), b)| (t, y + b))
                    .collect();
                let mut band = top.clone();
                let under = below.iter().enumerate().rev();
                band.extend(under.map(|(t, &b)| (x(t as f64), b)));
                chart.draw_series(std::iter::once(Polygon::new(band, line.color.mix(0.35))))?;
                below = top.iter().map(|&(_, y)| y).collect();
                chart.draw_series(LineSeries::new(top, style))?
            }
            (false, true) => chart.draw_series(DashedLineSeries::new(points, 6, 4, style))?,
            (false, false) => chart.draw_series(LineSeries::new(points, style))?,
        };
        legend(series, line);
    }
    Ok(())
}

fn legend<'a, DB: DrawingBackend + 'a>(series: &mut SeriesAnno<'a, DB>, line: &Line) {
    let style = ShapeStyle::from(&line.color).stroke_width(2);
    series.label(line.label.as_str());
    match line.dashed {
        true => series
            .legend(move |(x, y)| DashedPathElement::new(vec![(x, y), (x + 18, y)], 5, 3, style)),
        false => series.legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style)),
    };
}

fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", SMALL))
        .margin(6)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}
