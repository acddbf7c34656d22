%% @doc mdss from Erlang: a gen_server that owns an `mdss port' process and forwards calls to it.
%%
%% The port is Python (`python -m mdss.port --store Url'), spoken to in the
%% External Term Format framed as `{packet, 4}': a request is
%% `{call, Id, Op, Args}' and the answer `{reply, Id, Result}' or
%% `{error, Id, {Kind, Message}}'. The port serves requests concurrently, so
%% this server never waits for one: it keeps every caller in a map by `Id'
%% and answers each when its reply arrives, or with a timeout error when
%% none came in time. If the port exits, every pending caller gets
%% `{error, {port_exited, Message}}' and the next call starts a new port.
%%
%% Sets and members are UTF-8 binaries; scores are integers, floats, or
%% the atoms `inf' and `-inf'. Entries are `{Member, Score, Rank}'.
%% Leaderboards (the `board_' functions) take a `Board': a name, or
%% `{Name, #{columns => ..., windows => ...}}'; rows come back as
%% `{Owner, Values, Updated}' and ranked rows as `{Rank, Owner, Values, Updated}',
%% with `Values' a map of field names (binaries) to values. Every
%% function returns `{ok, Value}' or `{error, {Kind, Message}}', where
%% `Kind' is the name of the mdss exception (`InvalidMemberError', ...), or
%% `timeout', `port_exited' or `port_failed' for what happens on this side.
%% See erlang/README.md for the options and the operations of call/3.
-module(mdss).
-behaviour(gen_server).

-export([start_link/1, start_link/2, stop/1]).
-export([add/4, incr/4, rank/3, score/3, range/4, around/5, top/3, remove/3]).
-export([board_post/4, board_post/5, board_row/3, board_positions/3, board_around/6, board_rows/4,
         board_page/5, board_top/4, board_windows/2, board_percentile/4]).
-export([call/3, call/4, os_pid/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

-define(DEFAULT_TIMEOUT, 5000).
-define(DEFAULT_THREADS, 16).

-record(state, {
    url :: string(),
    python :: string(),
    threads :: pos_integer(),
    timeout :: timeout(),
    port = undefined :: port() | undefined,
    next_id = 1 :: pos_integer(),
    %% Id => {From, Timer}: the callers waiting for a reply
    pending = #{} :: #{pos_integer() => {gen_server:from(), reference()}}
}).

-type result() :: {ok, term()} | {error, {atom(), binary()}}.
-export_type([result/0]).

%% -- starting and stopping -----------------------------------------------------

%% @doc Start a client of the store at `StoreUrl' (`"sqlite:///board.db"', `"redis://host:6379/0"', ...).
-spec start_link(iodata()) -> {ok, pid()} | {error, term()}.
start_link(StoreUrl) ->
    start_link(StoreUrl, #{}).

%% @doc Start a client with options: `python' (the executable), `timeout' (ms per call,
%% default 5000) and `threads' (requests the port serves at once, default 16). An option
%% not given comes from the `mdss' application environment; `python' then from the
%% `MDSS_PYTHON' environment variable, then the `python3' on `PATH'.
-spec start_link(iodata(), #{atom() => term()}) -> {ok, pid()} | {error, term()}.
start_link(StoreUrl, Options) when is_map(Options) ->
    gen_server:start_link(?MODULE, {unicode:characters_to_list(StoreUrl), Options}, []).

-spec stop(pid()) -> ok.
stop(Pid) ->
    gen_server:stop(Pid).

%% -- the API ---------------------------------------------------------------------

%% @doc Set `Member''s score; `{ok, true}' if it is new.
add(Pid, Set, Member, Score) -> call(Pid, add, [Set, Member, Score]).

%% @doc Add `Delta' to `Member''s score (absent members start at 0); `{ok, NewScore}'.
incr(Pid, Set, Member, Delta) -> call(Pid, incr, [Set, Member, Delta]).

%% @doc `Member''s 1-based rank (ties broken by member), or `{ok, undefined}'.
rank(Pid, Set, Member) -> call(Pid, rank, [Set, Member]).

%% @doc `Member''s score, or `{ok, undefined}'.
score(Pid, Set, Member) -> call(Pid, score, [Set, Member]).

%% @doc Up to `Limit' entries from position `Offset' (0 is rank 1).
range(Pid, Set, Offset, Limit) -> call(Pid, range, [Set, Offset, Limit]).

%% @doc The entries around `Member', it included; `{ok, []}' if it is absent.
around(Pid, Set, Member, Before, After) -> call(Pid, around, [Set, Member, Before, After]).

%% @doc The best `N' entries of the set.
top(Pid, Set, N) -> call(Pid, range, [Set, 0, N]).

%% @doc Remove `Member'; `{ok, true}' if it was there.
remove(Pid, Set, Member) -> call(Pid, remove, [Set, Member]).

%% -- leaderboards (more options through call/3: see erlang/README.md) ------------

%% @doc Post `Values' (a map) for `Owner' to every window of the board; `{ok, #{Window => Changed}}'.
board_post(Pid, Board, Owner, Values) -> call(Pid, board_post, [Board, Owner, Values]).

%% @doc Post with options: `post_id' (a retried post is a no-op), `only' (`new' | `existing'), `ops'.
board_post(Pid, Board, Owner, Values, Options) -> call(Pid, board_post, [Board, Owner, Values, Options]).

%% @doc `Owner''s row in the default window: `{ok, {Owner, Values, Updated}}' or `{ok, undefined}'.
board_row(Pid, Board, Owner) -> call(Pid, board_row, [Board, Owner]).

%% @doc `Owner''s rank in every column its row has: `{ok, #{Column => Rank}}'.
board_positions(Pid, Board, Owner) -> call(Pid, board_positions, [Board, Owner]).

%% @doc The ranked rows around `Owner''s in `Column': up to `Before' better, up to `After' worse.
board_around(Pid, Board, Owner, Column, Before, After) ->
    call(Pid, board_around, [Board, Owner, Column, Before, After]).

%% @doc The ranked rows of `Owners' (friends) in `Column', best first.
board_rows(Pid, Board, Owners, Column) -> call(Pid, board_rows, [Board, Owners, Column]).

%% @doc A page of `Column': `{ok, {RankedRows, NextCursor or undefined}}'; `Cursor' `undefined' for the first.
board_page(Pid, Board, Column, Limit, Cursor) -> call(Pid, board_page, [Board, Column, Limit, Cursor]).

%% @doc The best `N' ranked rows of `Column'.
board_top(Pid, Board, Column, N) -> call(Pid, board_top, [Board, Column, N]).

%% @doc The board's window instances, oldest first (`<<"all">>', `<<"week:2026-W47">>', ...).
board_windows(Pid, Board) -> call(Pid, board_windows, [Board]).

%% @doc The share of `Column''s rows ranked strictly better than `Owner''s (0.0 for the best), or `undefined'.
board_percentile(Pid, Board, Owner, Column) -> call(Pid, board_percentile, [Board, Owner, Column]).

%% @doc Any operation of the port (see erlang/README.md), with the client's timeout.
-spec call(pid(), atom(), list()) -> result().
call(Pid, Op, Args) ->
    gen_server:call(Pid, {call, Op, Args, default}, infinity).

%% @doc Any operation of the port, answered within `Timeout' ms or `{error, {timeout, _}}'.
-spec call(pid(), atom(), list(), timeout()) -> result().
call(Pid, Op, Args, Timeout) ->
    gen_server:call(Pid, {call, Op, Args, Timeout}, infinity).

%% @doc The operating-system pid of the port process (`{error, {port_exited, _}}' if none runs).
-spec os_pid(pid()) -> result().
os_pid(Pid) ->
    gen_server:call(Pid, os_pid, infinity).

%% -- gen_server ------------------------------------------------------------------

init({Url, Options}) ->
    process_flag(trap_exit, true),
    case python(Options) of
        false ->
            {stop, {no_python, "no python3 on PATH: set the python option, the mdss application's python, "
                               "or MDSS_PYTHON"}};
        Python ->
            State = #state{url = Url, python = Python,
                           threads = option(threads, Options, ?DEFAULT_THREADS),
                           timeout = option(timeout, Options, ?DEFAULT_TIMEOUT)},
            case open(State) of
                {ok, Started} -> {ok, Started};
                {error, Why} -> {stop, {port_failed, Why}}
            end
    end.

handle_call({call, Op, Args, Timeout0}, From, State0) ->
    Timeout = case Timeout0 of default -> State0#state.timeout; _ -> Timeout0 end,
    case open(State0) of
        {error, Why} ->
            {reply, {error, {port_failed, Why}}, State0};
        {ok, State = #state{port = Port, next_id = Id, pending = Pending}} ->
            try port_command(Port, term_to_binary({call, Id, Op, Args})) of
                true ->
                    Timer = timer(Timeout, Id),
                    {noreply, State#state{next_id = Id + 1, pending = Pending#{Id => {From, Timer}}}}
            catch
                error:badarg -> % the port died just now; its exit message follows
                    {reply, {error, {port_exited, <<"the mdss port exited before the request was sent">>}}, State}
            end
    end;
handle_call(os_pid, _From, State = #state{port = undefined}) ->
    {reply, {error, {port_exited, <<"no mdss port is running">>}}, State};
handle_call(os_pid, _From, State = #state{port = Port}) ->
    case erlang:port_info(Port, os_pid) of
        {os_pid, OsPid} -> {reply, {ok, OsPid}, State};
        undefined -> {reply, {error, {port_exited, <<"no mdss port is running">>}}, State}
    end.

handle_cast(_Request, State) ->
    {noreply, State}.

handle_info({Port, {data, Data}}, State = #state{port = Port}) ->
    case catch binary_to_term(Data) of
        {reply, Id, Result} -> {noreply, answer(Id, {ok, Result}, State)};
        {error, Id, Reason = {_Kind, _Message}} -> {noreply, answer(Id, {error, Reason}, State)};
        Other ->
            logger:warning("mdss: unexpected data from the port: ~tP", [Other, 20]),
            {noreply, State}
    end;
handle_info({timeout, Id}, State) ->
    Message = <<"no reply from the mdss port in time (the call may still take effect)">>,
    {noreply, answer(Id, {error, {timeout, Message}}, State)};
handle_info({Port, {exit_status, Status}}, State = #state{port = Port}) ->
    {noreply, port_gone(io_lib:format("the mdss port exited with status ~b", [Status]), State)};
handle_info({'EXIT', Port, Reason}, State = #state{port = Port}) ->
    {noreply, port_gone(io_lib:format("the mdss port closed: ~tp", [Reason]), State)};
handle_info(_Stale, State) -> % a late reply, an old port's exit, a timer already answered
    {noreply, State}.

terminate(_Reason, #state{port = Port}) ->
    Port =:= undefined orelse catch port_close(Port),
    ok.

%% -- internals -------------------------------------------------------------------

%% Start the port unless it runs.
open(State = #state{port = Port}) when Port =/= undefined ->
    {ok, State};
open(State = #state{url = Url, python = Python, threads = Threads}) ->
    Args = ["-m", "mdss.port", "--store", Url, "--threads", integer_to_list(Threads)],
    try open_port({spawn_executable, Python}, [{args, Args}, {packet, 4}, binary, exit_status, use_stdio, hide]) of
        Port -> {ok, State#state{port = Port}}
    catch
        error:Why -> {error, unicode:characters_to_binary(io_lib:format("cannot run ~ts: ~tp", [Python, Why]))}
    end.

%% Answer the caller waiting for `Id' (if it still waits) and forget it.
answer(Id, Reply, State = #state{pending = Pending}) ->
    case maps:take(Id, Pending) of
        {{From, Timer}, Rest} ->
            cancel(Timer),
            gen_server:reply(From, Reply),
            State#state{pending = Rest};
        error ->
            State
    end.

%% The port exited: fail every pending call; the next call starts a new port.
port_gone(Why, State = #state{pending = Pending}) ->
    Reply = {error, {port_exited, unicode:characters_to_binary(Why)}},
    maps:foreach(fun(_Id, {From, Timer}) -> cancel(Timer), gen_server:reply(From, Reply) end, Pending),
    State#state{port = undefined, pending = #{}}.

timer(infinity, _Id) -> undefined;
timer(Timeout, Id) -> erlang:send_after(Timeout, self(), {timeout, Id}).

cancel(undefined) -> ok;
cancel(Timer) -> erlang:cancel_timer(Timer), ok.

%% An option from the start options, else the application environment, else the default.
option(Key, Options, Default) ->
    case maps:find(Key, Options) of
        {ok, Value} -> Value;
        error -> application:get_env(mdss, Key, Default)
    end.

%% The Python executable: the option, the application's `python', `MDSS_PYTHON', or `python3' on PATH.
python(Options) ->
    case option(python, Options, os:getenv("MDSS_PYTHON", "")) of
        "" -> os:find_executable("python3");
        Path -> Path
    end.
