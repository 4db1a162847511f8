package bench

import "context"

// azurite is the Azure driver's section: a stub until queue/azure lands.
// Its benchmark replaces this func in Sections; the figures to fill are
// the Azure-side twins of sections 1, 4 and 7 (listener vs plain loop,
// calls per message without batch delete, raw Put and Get(32)+Delete
// rates) against a local Azurite, in the same run as the others.
func azurite(_ context.Context, _ *Env, s *Section) error {
	s.how("Filled by the Azure driver's benchmark (`queue/azure` against a local Azurite) once that driver lands: the same " +
		"figures as sections 1, 4 and 7 (listener vs the plain loop, calls per message without batch delete, raw Put and " +
		"Get(32)+Delete rates), measured in the same run as the rest. A section is one `SectionFunc` in `bench.Sections`; " +
		"this one is a stub.")
	s.add(Row{What: "Azure driver against Azurite", Figure: "not measured yet", Note: "stub: filled by the Azure driver's benchmark"})
	return nil
}
