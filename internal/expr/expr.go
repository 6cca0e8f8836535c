// Package expr compiles and evaluates the CEL expressions of a WebhookEndpoint: the event
// extraction expressions (over `body` and `headers`) and the transition guards (over
// `event`, `entity` and `live`). Programs are compiled once when an endpoint is loaded and
// evaluated per request under a cost limit, so a pathological expression cannot stall the
// receiver. Compile errors name the spec field they came from.
package expr

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
)

// CostLimit bounds the runtime cost of one evaluation. Extraction and guard expressions
// are small field reads and comparisons; the limit only stops runaway comprehensions
// over large payloads.
const CostLimit = 1_000_000

// NewEnv returns a CEL environment with the standard library, optional field syntax
// (`body.?data.?object.orValue(...)`), the strings extension and compile-time checks of
// regex, duration and timestamp literals, plus the given variables.
func NewEnv(vars ...cel.EnvOption) (*cel.Env, error) {
	opts := []cel.EnvOption{
		cel.OptionalTypes(),
		ext.Strings(),
		cel.CrossTypeNumericComparisons(true),
		cel.ASTValidators(
			cel.ValidateRegexLiterals(),
			cel.ValidateDurationLiterals(),
			cel.ValidateTimestampLiterals(),
		),
	}
	env, err := cel.NewEnv(append(opts, vars...)...)
	if err != nil {
		return nil, fmt.Errorf("create CEL environment: %w", err)
	}
	return env, nil
}

// FieldError is a problem with one field of a WebhookEndpoint spec.
type FieldError struct {
	// Field is the spec path, e.g. "spec.stateMachine.transitions[capture].guard".
	Field string
	// Detail says what is wrong in words a person can act on.
	Detail string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

// Errorf returns a *FieldError for field.
func Errorf(field, format string, args ...any) error {
	return &FieldError{Field: field, Detail: fmt.Sprintf(format, args...)}
}

// Program is a compiled expression with the spec field it came from.
type Program struct {
	Field  string
	Source string
	prg    cel.Program
	// tracked: evaluations are metered against CostLimit (costMayExceedLimit).
	tracked bool
}

// Compile parses and type-checks src for field. When allowed is not empty, the
// expression's static type must be one of them (dyn is accepted, and checked at runtime).
// checkFields, when not nil, maps a variable name to its known fields: selecting an
// unknown field of it is a compile error (CEL maps would otherwise only fail at runtime).
func Compile(env *cel.Env, field, src string, allowed []*cel.Type, checkFields map[string][]string) (*Program, error) {
	if strings.TrimSpace(src) == "" {
		return nil, Errorf(field, "expression is empty")
	}
	checked, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, issuesError(field, iss)
	}
	if len(allowed) > 0 {
		out := checked.OutputType()
		ok := out.IsExactType(cel.DynType)
		for _, t := range allowed {
			ok = ok || out.IsExactType(t)
		}
		if !ok {
			names := make([]string, len(allowed))
			for i, t := range allowed {
				names[i] = t.String()
			}
			return nil, Errorf(field, "expression has type %s, want %s", out, strings.Join(names, " or "))
		}
	}
	if err := checkSelections(checked, field, checkFields); err != nil {
		return nil, err
	}
	tracked := costMayExceedLimit(env, checked)
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	if tracked {
		opts = append(opts, cel.CostLimit(CostLimit))
	}
	prg, err := env.Program(checked, opts...)
	if err != nil {
		return nil, Errorf(field, "%v", err)
	}
	return &Program{Field: field, Source: src, prg: prg, tracked: tracked}, nil
}

// costMayExceedLimit tells whether the checked expression's cost has no static bound
// within CostLimit, so that its evaluations must be metered. CEL's static estimate is an
// upper bound of the runtime cost that the metering counts; a value whose size CEL
// cannot know (anything from the payload or headers) counts as unbounded, so every
// comprehension or size-dependent call over them stays metered, while field reads,
// comparisons and arithmetic (what extraction expressions and most guards are) run
// without the per-step cost callbacks.
func costMayExceedLimit(env *cel.Env, checked *cel.Ast) bool {
	est, err := env.EstimateCost(checked, unknownSizes{})
	return err != nil || est.Max > CostLimit
}

// unknownSizes leaves every size and call cost to CEL's defaults: unknown sizes are
// unbounded.
type unknownSizes struct{}

func (unknownSizes) EstimateSize(checker.AstNode) *checker.SizeEstimate { return nil }

func (unknownSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// Eval evaluates the program. The error names the field, never the variables' values.
func (p *Program) Eval(vars map[string]any) (ref.Val, error) {
	out, _, err := p.prg.Eval(vars)
	if err != nil {
		return nil, fmt.Errorf("evaluate %s: %w", p.Field, err)
	}
	if types.IsError(out) {
		return nil, fmt.Errorf("evaluate %s: %v", p.Field, out)
	}
	return out, nil
}

func issuesError(field string, iss *cel.Issues) error {
	var msgs []string
	for _, e := range iss.Errors() {
		msg := e.Message
		if loc := e.Location; loc != nil && loc.Line() > 0 {
			msg = fmt.Sprintf("%s (at %d:%d)", msg, loc.Line(), loc.Column()+1)
		}
		msgs = append(msgs, msg)
	}
	if len(msgs) == 0 {
		msgs = append(msgs, iss.String())
	}
	return &FieldError{Field: field, Detail: strings.Join(msgs, "; ")}
}

// checkSelections rejects `v.f` where v is a variable listed in known and f is not one
// of its fields, so a typo in a guard (event.amout) fails validation instead of every
// request.
func checkSelections(checked *cel.Ast, field string, known map[string][]string) error {
	if len(known) == 0 {
		return nil
	}
	native := checked.NativeRep()
	var errs []error
	ast.PreOrderVisit(native.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() != ast.SelectKind {
			return
		}
		sel := e.AsSelect()
		op := sel.Operand()
		if op.Kind() != ast.IdentKind {
			return
		}
		fields, ok := known[op.AsIdent()]
		if !ok {
			return
		}
		for _, f := range fields {
			if f == sel.FieldName() {
				return
			}
		}
		sorted := append([]string(nil), fields...)
		sort.Strings(sorted)
		loc := native.SourceInfo().GetStartLocation(e.ID())
		detail := fmt.Sprintf("undefined field '%s' of '%s' (fields: %s)", sel.FieldName(), op.AsIdent(), strings.Join(sorted, ", "))
		if loc.Line() > 0 {
			detail = fmt.Sprintf("%s (at %d:%d)", detail, loc.Line(), loc.Column()+1)
		}
		errs = append(errs, &FieldError{Field: field, Detail: detail})
	}))
	return errors.Join(errs...)
}
