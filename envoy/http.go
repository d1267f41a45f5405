package envoy

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-rl/floodgate/internal/problem"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
)

// MaxJSONBodyBytes bounds the body of a POST /json request; larger ones are
// answered 413.
const MaxJSONBodyBytes = 64 << 10

// JSONHandler returns the HTTP form of ShouldRateLimit, as the reference
// service offers it on POST /json: the body is a RateLimitRequest in the
// protobuf JSON mapping, such as
//
//	{"domain":"messaging","descriptors":[{"entries":[{"key":"to_number","value":"2061111111"}]}]}
//
// and the answer a RateLimitResponse in the same mapping, with status 200
// when the overall code is OK and 429 when it is OVER_LIMIT. Errors are
// problem details (RFC 9457): 400 for a body that is not a valid request,
// 503 with Retry-After when the store is unavailable under failure mode
// error, 405 for methods other than POST, 413 for bodies over
// MaxJSONBodyBytes. Mount it at /json.
func (s *Service) JSONHandler() http.Handler {
	return http.HandlerFunc(s.serveJSON)
}

func (s *Service) serveJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		problem.Error(w, http.StatusMethodNotAllowed, "POST a RateLimitRequest as JSON to "+r.URL.Path)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem.Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", MaxJSONBodyBytes))
		} else {
			problem.Error(w, http.StatusBadRequest, "reading the body: "+err.Error())
		}
		return
	}
	req := &rlsv3.RateLimitRequest{}
	if err := protojson.Unmarshal(body, req); err != nil {
		problem.Error(w, http.StatusBadRequest, "the body is not a RateLimitRequest in protobuf JSON: "+err.Error())
		return
	}
	resp, err := s.ShouldRateLimit(r.Context(), req)
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.InvalidArgument:
			problem.Error(w, http.StatusBadRequest, st.Message())
		case codes.Unavailable:
			w.Header().Set(ratelimitheader.HeaderRetryAfter, ratelimitheader.RetryAfter(s.engine.UnavailableRetryAfter()))
			s.fail(w, r, http.StatusServiceUnavailable, problem.KindStoreUnavailable, "the rate-limit store is unavailable and the rule fails closed; retry after the number of seconds in Retry-After", err)
		case codes.Unknown:
			problem.Error(w, http.StatusInternalServerError, st.Message()) // no rules loaded: the operator's to fix, no internals
		default:
			s.fail(w, r, http.StatusInternalServerError, problem.KindStoreError, "the rate-limit store failed; the request was not decided (the server's log has the error under the request id)", err)
		}
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, problem.KindInternal, "the answer could not be encoded", err)
		return
	}
	code := http.StatusOK
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		code = http.StatusTooManyRequests
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(out, '\n'))
}

// fail answers a POST /json the service could not serve with
// problem.Failure and logs err with its request id, through the log
// throttle.
func (s *Service) fail(w http.ResponseWriter, r *http.Request, code int, kind, detail string, err error) {
	id := problem.Failure(w, code, kind, detail)
	s.warn.Warn(r.Context(), "POST /json failed", slog.String("request_id", id), slog.String("kind", kind), slog.Int("status", code), slog.String("err", err.Error()))
}
