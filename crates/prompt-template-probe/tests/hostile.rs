//! Hostile chat templates: each class of template that would abort the process, run for
//! minutes or grow without bound is stopped by a limit and reported as a render error naming
//! it. The tests assert the outcome, never the time taken.

use prompt_template_probe::{
    ChatTemplate, HeadSystem, Limit, MidSystem, ProbeReport, RenderError, RenderLimits,
    RenderOptions, probe,
};
use serde_json::json;

/// Renders `src` with the probe's limits on a one-message conversation.
fn render(src: &str) -> Result<String, RenderError> {
    render_with(src, RenderLimits::PROBE)
}

fn render_with(src: &str, limits: RenderLimits) -> Result<String, RenderError> {
    let options = RenderOptions::default().with_limits(limits);
    let template = ChatTemplate::with_options(src, options).unwrap_or_else(|e| panic!("{e}"));
    template.render(&[json!({"role": "user", "content": "hi"})], true)
}

/// The limit `src` exceeds when rendered.
fn limit(src: &str) -> Limit {
    match render(src) {
        Err(RenderError::Limit { limit, .. }) => limit,
        other => panic!("expected a limit error, got {other:?}"),
    }
}

/// The probe reports a render error naming `reason`, for every question it asks.
fn assert_probe_reports(src: &str, reason: &str) -> ProbeReport {
    let report = probe(src);
    let MidSystem::RenderError { message } = &report.mid_system else {
        panic!("mid_system is {:?}", report.mid_system);
    };
    assert!(
        message.contains(reason),
        "{message:?} does not name {reason:?}"
    );
    assert!(
        matches!(&report.head_system, HeadSystem::RenderError { message } if message.contains(reason)),
        "{:?}",
        report.head_system
    );
    assert_eq!(report.delivery.label(), "refuse");
    assert_eq!(report.prefix_stable.as_bool(), None);
    report
}

fn compile_error(src: &str) -> String {
    match ChatTemplate::new(src) {
        Err(e) => e.message,
        Ok(_) => panic!("{src:.80} compiles"),
    }
}

#[test]
fn tojson_with_a_huge_indent_is_a_render_error_not_an_abort() {
    assert_eq!(
        limit("{{ messages | tojson(indent=10**15) }}"),
        Limit::Argument
    );
    assert_eq!(limit("{{ messages | tojson(indent=65) }}"), Limit::Argument);
    assert_eq!(
        limit("{{ messages | tojson(indent=' ' * 100) }}"),
        Limit::Argument
    );
    assert_probe_reports(
        "{{ messages | tojson(indent=10**15) }}",
        "tojson indent is wider than 64",
    );
    // Small indents still work, negative ones put newlines only, as in Python.
    assert_eq!(
        render("{{ [1] | tojson(indent=64) | length }}|{{ [1] | tojson(indent=-3) }}").as_deref(),
        Ok("69|[\n1\n]")
    );
}

#[test]
fn tojson_output_is_capped_and_charged() {
    // Indentation multiplies a small value: 20 levels of lists, each line indented 64 × depth.
    let src = "{% set ns = namespace(v=1) %}{% for i in range(20) %}{% set ns.v = [ns.v, ns.v] %}{% endfor %}{{ ns.v | tojson(indent=64) | length }}";
    assert!(matches!(
        render(src),
        Err(RenderError::Limit {
            limit: Limit::ValueSize | Limit::Fuel,
            ..
        })
    ));
}

#[test]
fn nested_range_runs_out_of_fuel() {
    let src = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
    assert_eq!(limit(src), Limit::Fuel);
    assert_probe_reports(src, "ran out of fuel (10000 per render)");
}

#[test]
fn range_of_a_billion_is_refused() {
    let err = render("{{ range(10**9) | list | length }}");
    assert!(
        matches!(&err, Err(RenderError::Engine { message }) if message.contains("range has too many elements")),
        "{err:?}"
    );
}

#[test]
fn a_self_recursive_macro_hits_the_recursion_limit() {
    let src = "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}";
    assert_eq!(limit(src), Limit::Recursion);
    assert_probe_reports(src, "nest more than 64 deep");
    // Call blocks and recursive loops too.
    assert_eq!(
        limit(
            "{% macro m() %}{{ caller() }}{% endmacro %}{% macro f() %}{% call m() %}{{ f() }}{% endcall %}{% endmacro %}{{ f() }}"
        ),
        Limit::Recursion
    );
    assert_eq!(
        limit("{% for i in [1] recursive %}{{ loop([1]) }}{% endfor %}"),
        Limit::Recursion
    );
}

#[test]
fn a_template_that_includes_itself_hits_the_recursion_limit() {
    assert_eq!(limit("{% include 'chat_template' %}"), Limit::Recursion);
}

#[test]
fn an_output_loop_is_stopped_at_the_output_cap() {
    // With the probe's limits the fuel (which pays for output too) or the cap stops it.
    let src = "{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}{% endfor %}";
    assert!(matches!(limit(src), Limit::Output | Limit::Fuel));
    assert_probe_reports(src, "exceeds a render limit");
    // With the fuel to spare, the cap alone stops it.
    let limits = RenderLimits::PROBE
        .with_fuel(100_000_000)
        .with_output_bytes(1000);
    let err = render_with(src, limits);
    assert!(
        matches!(&err, Err(RenderError::Limit { limit: Limit::Output, message }) if message.contains("the output exceeds 1000 bytes")),
        "{err:?}"
    );
    assert!(matches!(
        render_with(
            "{% for i in range(100) %}{{ 'x' * 100 }}{% endfor %}",
            limits
        ),
        Err(RenderError::Limit {
            limit: Limit::Output,
            ..
        })
    ));
    assert_eq!(
        render_with("{% for i in range(9) %}{{ 'x' * 100 }}{% endfor %}", limits).map(|s| s.len()),
        Ok(900)
    );
}

#[test]
fn string_repetition_is_refused_before_allocating() {
    // The fuel must pay for the string before it is made.
    assert_eq!(limit("{{ 'x' * 10**9 }}"), Limit::Fuel);
    assert_eq!(limit("{{ 'x' * 10**7 }}"), Limit::Fuel);
    let err = render_with(
        "{{ 'x' * 10**9 }}",
        RenderLimits::PROBE.with_fuel(u64::MAX / 64),
    );
    assert!(
        matches!(&err, Err(RenderError::Engine { message }) if message.contains("repeated string is too large")),
        "{err:?}"
    );
    assert_eq!(
        limit("{{ ('x' * 10000).replace('x', 'y' * 10000) }}"),
        Limit::Fuel
    );
    assert_eq!(
        limit("{{ ('x' * 10000) | replace('x', 'y' * 10000) }}"),
        Limit::Fuel
    );
}

#[test]
fn python_padding_methods_are_unknown_not_allocated() {
    for method in ["center", "ljust", "rjust", "zfill"] {
        let err = render(&format!("{{{{ 'x'.{method}(10**12) }}}}"));
        assert!(
            matches!(&err, Err(RenderError::Engine { message }) if message.contains(&format!("no method named {method}"))),
            "{err:?}"
        );
    }
}

#[test]
fn str_format_with_a_huge_width_is_a_render_error_not_an_abort() {
    assert_eq!(
        limit("{{ '{:>1000000000000}'.format(1) }}"),
        Limit::Argument
    );
    assert_eq!(
        limit("{{ '{:.1000000000000f}'.format(1.5) }}"),
        Limit::Argument
    );
    assert_eq!(
        render("{{ '{:>5}|{{}}'.format(1) }}").as_deref(),
        Ok("    1|{}")
    );
    // printf-style `format` is charged by minijinja before it allocates.
    assert_eq!(limit("{{ '%1000000000000d' | format(1) }}"), Limit::Fuel);
}

#[test]
fn joining_a_huge_range_is_refused() {
    // Measuring the range runs out of fuel before it reaches the size limit.
    for src in [
        "{{ ' '.join(range(100000)) }}",
        "{{ range(100000) | join(' ') }}",
        "{{ range(100000) | list | length }}",
    ] {
        assert!(
            matches!(limit(src), Limit::ValueSize | Limit::Fuel),
            "{src}"
        );
    }
    let limits = RenderLimits::PROBE.with_fuel(10_000_000);
    assert!(matches!(
        render_with("{{ ' '.join(range(100000)) }}", limits),
        Err(RenderError::Limit {
            limit: Limit::ValueSize,
            ..
        })
    ));
    assert_eq!(render("{{ ' '.join(range(3)) }}").as_deref(), Ok("0 1 2"));
}

#[test]
fn shared_references_cannot_print_as_terabytes() {
    // Cheap to build (the list holds 10**8 references to one string), huge to print; each
    // is stopped at its size or by its fuel.
    for src in [
        "{{ 'a' ~ [1] * 10**8 }}",
        "{{ [1] * 10**8 }}",
        "{{ ([1] * 10**8) in 'abc' }}",
        "{{ ([1] * 10**8) | upper }}",
        "{{ '%s' | format([1] * 10**8) }}",
        "{{ ''.join(['x' * 1000] * 100000) }}",
        "{{ (['x' * 1000] * 100000) | join }}",
        "{{ {}[[1] * 10**8] }}",
        "{{ raise_exception([1] * 10**8) }}",
        // Doubling a list sixty times: 2**60 items for sixty instructions.
        "{% set ns = namespace(a=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ 'x' ~ ns.a }}",
        // Lazily added lists are flattened unpaid once chained 32 deep.
        "{% set ns = namespace(a=[1]) %}{% for i in range(64) %}{% set ns.a = ns.a + ns.a %}{% endfor %}{{ ns.a | length }}",
    ] {
        let err = render(src);
        assert!(
            matches!(
                err,
                Err(RenderError::Limit {
                    limit: Limit::ValueSize | Limit::Fuel,
                    ..
                })
            ),
            "{src}: {err:?}"
        );
    }
}

#[test]
fn values_nested_too_deep_are_refused() {
    // Each iteration wraps the list once more; dropping or printing it would recurse once per
    // level.
    assert_eq!(
        limit(
            "{% set ns = namespace(a=[]) %}{% for i in range(10000) %}{% set ns.a = [ns.a] %}{% endfor %}{{ ns.a | length }}"
        ),
        Limit::ValueDepth
    );
    // A namespace that contains itself prints forever and is never freed (a reference
    // cycle): assigning it into itself is refused.
    for src in [
        "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}",
        "{% set ns = namespace() %}{% set ns.me = [1, {'a': ns}] %}",
        "{% set a = namespace() %}{% set b = namespace(a=a) %}{% set a.b = b %}",
        "{% set ns = namespace() %}{% set ns.x, ns.y = 1, ns %}",
    ] {
        let err = render(src);
        assert!(
            matches!(&err, Err(RenderError::Limit { limit: Limit::ValueDepth, message }) if message.contains("would contain itself")),
            "{src}: {err:?}"
        );
    }
    assert_eq!(
        render("{% set ns = namespace(a=[]) %}{% for i in range(3) %}{% set ns.a = ns.a + [i] %}{% endfor %}{{ ns.a }}").as_deref(),
        Ok("[0, 1, 2]")
    );
}

#[test]
fn comparing_large_strings_in_a_loop_runs_out_of_fuel() {
    let src = "{% set s = 'x' * 200000 %}{% set t = 'x' * 200000 %}{% for i in range(100000) %}{% if s == t %}{% endif %}{% endfor %}";
    assert_eq!(limit(src), Limit::Fuel);
    let src =
        "{% set s = 'x' * 200000 %}{% for i in range(100000) %}{{ s.count('y') }}{% endfor %}";
    assert_eq!(limit(src), Limit::Fuel);
}

#[test]
fn splitting_pays_for_the_list_before_building_it() {
    assert_eq!(
        limit("{{ (',' * 1000000).split(',') | length }}"),
        Limit::Fuel
    );
    assert_eq!(
        limit("{{ (',' * 1000000) | split(',') | length }}"),
        Limit::Fuel
    );
    assert_eq!(
        limit("{{ ('\\n' * 1000000) | lines | length }}"),
        Limit::Fuel
    );
    assert_eq!(
        render(
            "{{ 'a,b' | split(',') | list }}|{{ 'a b'.split() }}|{{ 'a\\nb' | lines | length }}"
        )
        .as_deref(),
        Ok("['a', 'b']|['a', 'b']|2")
    );
}

#[test]
fn a_64_kib_line_is_a_template_error_not_a_panic() {
    // A syntax error at column 65 535 made minijinja's lexer add one to a saturated u16.
    let src = format!("{{{{ {} +", "x".repeat(70_000));
    let message = compile_error(&src);
    assert!(
        message.contains("line 1 is 70005 characters long"),
        "{message}"
    );
    let report = probe(&src);
    assert_eq!(report.mid_system.label(), "render_error");
    // A line just within the bound still reports the syntax error.
    let src = format!("{{{{ {} +", "x".repeat(65_534 - 5));
    let message = compile_error(&src);
    assert!(message.contains("syntax error"), "{message}");
}

#[test]
fn an_i64_min_slice_step_is_a_render_error_not_a_panic() {
    // minijinja negates the step: `-i64::MIN` overflows.
    assert_eq!(limit("{{ 'ab'[::-9223372036854775808] }}"), Limit::Argument);
    assert_eq!(
        limit("{{ [1, 2][::-9223372036854775808] }}"),
        Limit::Argument
    );
    assert_eq!(
        limit("{% set s = -9223372036854775807 - 1 %}{{ 'ab'[::s] }}"),
        Limit::Argument
    );
    assert_eq!(
        limit("{{ 'ab'[::-9223372036854775808.0] }}"),
        Limit::Argument
    );
    assert_probe_reports("{{ 'ab'[::-9223372036854775808] }}", "slice step");
    assert_eq!(
        render("{{ 'abc'[::-1] }}|{{ 'abc'[::-9223372036854775807] }}|{{ [1, 2, 3][1::2] }}")
            .as_deref(),
        Ok("cba|c|[2]")
    );
}

#[test]
fn an_isize_min_range_step_is_a_render_error_not_a_panic() {
    // minijinja computes `(start - end + (-step) - 1) / (-step)` in isize.
    assert_eq!(
        limit("{{ range(1, 0, -9223372036854775808) | list }}"),
        Limit::Argument
    );
    assert_eq!(
        limit("{{ range(9223372036854775807, -9223372036854775808, -1) | length }}"),
        Limit::Argument
    );
    assert_eq!(
        render("{{ range(5, 0, -2) | list }}").as_deref(),
        Ok("[5, 3, 1]")
    );
}

#[test]
fn loop_cycle_without_items_is_a_render_error_not_a_panic() {
    // minijinja indexes the items modulo their count: a division by zero.
    for src in [
        "{% for i in [1] %}{{ loop.cycle() }}{% endfor %}",
        "{% for i in [1] %}{{ loop.cycle(*[]) }}{% endfor %}",
    ] {
        let err = render(src);
        assert!(
            matches!(&err, Err(RenderError::Engine { message }) if message.contains("no items for cycling given")),
            "{src}: {err:?}"
        );
    }
    assert_eq!(
        render(
            "{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{{ loop.cycle(*['c']) }}{% endfor %}"
        )
        .as_deref(),
        Ok("acbcac")
    );
}

#[test]
fn deeply_nested_literals_are_a_template_error_not_a_stack_overflow() {
    for (open, close) in [("[", "]"), ("(", ")"), ("{'a': ", "}")] {
        let src = format!("{{{{ {}1{} }}}}", open.repeat(5000), close.repeat(5000));
        let message = compile_error(&src);
        assert!(
            message.contains("maximum recursion limits") || message.contains("chains more than"),
            "{message}"
        );
    }
    let src = format!(
        "{}{}",
        "{% if 1 %}\n".repeat(5000),
        "{% endif %}\n".repeat(5000)
    );
    assert!(compile_error(&src).contains("recursion"));
}

#[test]
fn long_operator_chains_are_a_template_error_not_a_stack_overflow() {
    for src in [
        format!("{{{{ {}1 }}}}", "-".repeat(5000)),
        format!("{{{{ {}1 }}}}", "not ".repeat(5000)),
        format!("{{{{ {} }}}}", ["1"; 5000].join(" + ")),
        format!("{{{{ {} }}}}", ["'a'"; 5000].join(" ~ ")),
        format!("{{{{ x{} }}}}", ".a".repeat(5000)),
        format!("{{{{ 1{} }}}}", "|abs".repeat(5000)),
    ] {
        let message = compile_error(&src);
        assert!(
            message.contains("chains more than 256 operators")
                || message.contains("maximum recursion limits"),
            "{message}"
        );
    }
    // Up to the bound, it compiles and renders.
    let src = format!("{{{{ {} }}}}", ["1"; 250].join(" + "));
    assert_eq!(render(&src).as_deref(), Ok("250"));
    let src = format!("{{{{ {} }}}}", ["'a'"; 250].join(" ~ "));
    assert_eq!(render(&src).map(|s| s.len()), Ok(250));
}

#[test]
fn huge_integer_literals_are_a_template_error() {
    let src = format!("{{{{ {} }}}}", "9".repeat(100));
    assert!(compile_error(&src).contains("invalid integer"));
}

#[test]
fn a_template_over_one_mib_is_refused() {
    let src = "x".repeat(1 << 20 | 1);
    assert!(compile_error(&src).contains("at most 1048576"));
}

#[test]
fn strftime_now_formats_are_bounded() {
    assert_eq!(limit("{{ strftime_now('%Y' * 200) }}"), Limit::Argument);
    assert_eq!(render("{{ strftime_now('%Y') }}").as_deref(), Ok("2026"));
}

#[test]
fn raise_exception_messages_are_truncated() {
    let err = render("{{ raise_exception('x' * 10000) }}");
    let Err(RenderError::Raised { message }) = err else {
        panic!("{err:?}");
    };
    assert_eq!(message.chars().count(), 2049);
    assert!(message.ends_with('…'));
}

#[test]
fn debug_is_not_defined() {
    let err = render("{{ debug() }}");
    assert!(
        matches!(&err, Err(RenderError::Engine { message }) if message.contains("debug is unknown")),
        "{err:?}"
    );
}

#[test]
fn fuel_is_budgeted_across_the_renders_of_a_probe() {
    // Each render burns fuel, then fails with an engine error that does not say how much it
    // used: it is counted at the full 10 000, so the 60 000 of a probe last six renders.
    let src = "{% for i in range(2000) %}{% endfor %}{{ no_such_function() }}";
    let options = RenderOptions::default().with_limits(RenderLimits::PROBE);
    let template = ChatTemplate::with_options(src, options).unwrap_or_else(|e| panic!("{e}"));
    let messages = [json!({"role": "user", "content": "hi"})];
    for _ in 0..6 {
        let err = template.render(&messages, true);
        assert!(
            matches!(&err, Err(RenderError::Engine { message }) if message.contains("no_such_function")),
            "{err:?}"
        );
    }
    let err = template.render(&messages, true);
    assert!(
        matches!(&err, Err(RenderError::Limit { limit: Limit::Fuel, message }) if message.contains("60000 over all renders")),
        "{err:?}"
    );
    // Renders that succeed are counted at what they used: a real template probes within
    // budget (the fixtures' tests), and without a budget nothing is refused.
    let options = RenderOptions::default().with_limits(RenderLimits::PROBE.with_total_fuel(None));
    let template = ChatTemplate::with_options(src, options).unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..10 {
        assert!(matches!(
            template.render(&messages, true),
            Err(RenderError::Engine { .. })
        ));
    }
}

#[test]
fn summing_strings_pays_for_the_copies() {
    // Each addition copies the sum so far: 50 000 one-byte strings copy 1.25 GB.
    assert_eq!(limit("{{ (['x'] * 50000) | sum(start='') }}"), Limit::Fuel);
    assert_eq!(
        render(
            "{{ ['a', 'b'] | sum(start='') }}|{{ [[1], [2]] | sum(start=[]) }}|{{ [1, 2] | sum }}"
        )
        .as_deref(),
        Ok("ab|[1, 2]|3")
    );
}
