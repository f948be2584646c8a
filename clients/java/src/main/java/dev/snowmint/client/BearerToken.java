package dev.snowmint.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import java.util.Objects;

/**
 * A tenant's bearer token (docs/operations/tenants.md), checked when the client is made and sent
 * as {@code authorization: Bearer <token>} gRPC metadata with every attempt of every call. An
 * interceptor rather than {@code CallCredentials}, which grpc-java withholds from plain-text
 * channels. The token never appears in an error or in this object's printed form.
 */
final class BearerToken implements ClientInterceptor {

    /** The longest token taken, in characters. */
    static final int MAX_LENGTH = 4096;

    private static final Metadata.Key<String> AUTHORIZATION =
            Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

    private final String header;

    private BearerToken(String token) {
        this.header = "Bearer " + token;
    }

    /**
     * The token {@code token}: 1 to {@value #MAX_LENGTH} characters, each a visible ASCII
     * character ({@code '!'} to {@code '~'}).
     *
     * @throws IllegalArgumentException for any other, with a message that does not show it
     */
    static BearerToken of(String token) {
        Objects.requireNonNull(token, "token");
        if (token.isEmpty() || token.length() > MAX_LENGTH) {
            throw new IllegalArgumentException("the token must be 1 to 4,096 characters, got " + token.length());
        }
        for (int i = 0; i < token.length(); i++) {
            char c = token.charAt(i);
            if (c < '!' || c > '~') {
                throw new IllegalArgumentException("the token's character " + (i + 1)
                        + " is not a visible ASCII character ('!' to '~')");
            }
        }
        return new BearerToken(token);
    }

    @Override
    public <ReqT, RespT> ClientCall<ReqT, RespT> interceptCall(
            MethodDescriptor<ReqT, RespT> method, CallOptions options, Channel next) {
        return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
            @Override
            public void start(Listener<RespT> listener, Metadata headers) {
                headers.put(AUTHORIZATION, header);
                super.start(listener, headers);
            }
        };
    }

    @Override
    public String toString() {
        return "BearerToken[redacted]";
    }
}
