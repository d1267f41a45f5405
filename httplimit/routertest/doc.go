// Package routertest checks that the httplimit middleware works with
// routers that take standard net/http middleware: chi, gorilla/mux, and echo
// through echo.WrapMiddleware. It is a module of its own so that the main
// module does not depend on those routers; run its tests with
//
//	cd httplimit/routertest && go test ./...
package routertest
