%% EUnit suite of the mdss client against a real port and store.
%%
%% MDSS_TEST_STORE names the store (tests/test_erlang.py passes a fresh SQLite file or Redis
%% namespace; without it, a new SQLite file under /tmp); MDSS_PYTHON the Python with mdss.
-module(mdss_tests).
-include_lib("eunit/include/eunit.hrl").

client_test_() ->
    {setup, fun start/0, fun mdss:stop/1,
     {with, [fun reads_and_writes/1,
             fun ties_and_scores/1,
             fun every_other_operation/1,
             fun percentiles_estimates_and_random_members/1,
             fun pops_and_range_removals/1,
             fun load_gc_and_drop/1,
             fun unions_and_intersections/1,
             fun pages_through_a_multi_level_set/1,
             fun top_n/1,
             fun leaderboard/1,
             fun leaderboard_removals_loads_and_drops/1,
             fun errors_name_the_mdss_exception/1,
             fun concurrent_callers/1,
             fun timeout_then_late_reply_is_dropped/1,
             fun restarts_a_port_that_exits/1]}}.

start() ->
    {ok, Pid} = mdss:start_link(store(), #{timeout => 20000}),
    Pid.

store() ->
    case os:getenv("MDSS_TEST_STORE") of
        false -> "sqlite:////tmp/mdss-eunit-" ++ integer_to_list(erlang:unique_integer([positive])) ++ ".db";
        Url -> Url
    end.

reads_and_writes(Pid) ->
    S = <<"season-1">>,
    ?assertEqual({ok, true}, mdss:add(Pid, S, <<"alice">>, 310)),
    ?assertEqual({ok, true}, mdss:add(Pid, S, <<"bob">>, 120)),
    ?assertEqual({ok, true}, mdss:add(Pid, S, <<"carol">>, 310)),
    ?assertEqual({ok, false}, mdss:add(Pid, S, <<"bob">>, 125)),
    ?assertEqual({ok, 150}, mdss:incr(Pid, S, <<"dave">>, 150)),
    ?assertEqual({ok, 310}, mdss:score(Pid, S, <<"alice">>)),
    ?assertEqual({ok, undefined}, mdss:score(Pid, S, <<"nobody">>)),
    ?assertEqual({ok, 2}, mdss:rank(Pid, S, <<"carol">>)),
    ?assertEqual({ok, undefined}, mdss:rank(Pid, S, <<"nobody">>)),
    ?assertEqual({ok, [{<<"alice">>, 310, 1}, {<<"carol">>, 310, 2}]}, mdss:top(Pid, S, 2)),
    ?assertEqual({ok, [{<<"dave">>, 150, 3}, {<<"bob">>, 125, 4}]}, mdss:range(Pid, S, 2, 10)),
    ?assertEqual({ok, [{<<"carol">>, 310, 2}, {<<"dave">>, 150, 3}, {<<"bob">>, 125, 4}]},
                 mdss:around(Pid, S, <<"dave">>, 1, 1)),
    ?assertEqual({ok, []}, mdss:around(Pid, S, <<"nobody">>, 1, 1)),
    ?assertEqual({ok, true}, mdss:remove(Pid, S, <<"bob">>)),
    ?assertEqual({ok, false}, mdss:remove(Pid, S, <<"bob">>)),
    ?assertEqual({ok, 3}, mdss:call(Pid, len, [S])),
    member_data(Pid),
    first_ties(Pid).

member_data(Pid) ->
    S = <<"with-data">>,
    ?assertEqual({ok, true}, mdss:add(Pid, S, <<"ann">>, 300, set, <<"team red">>)),
    ?assertEqual({ok, false}, mdss:add(Pid, S, <<"ann">>, 250, best, <<"lost">>)),
    ?assertEqual({ok, <<"team red">>}, mdss:data(Pid, S, <<"ann">>)),
    ?assertEqual({ok, true}, mdss:add(Pid, S, <<"bob">>, 200)),
    ?assertEqual({ok, undefined}, mdss:data(Pid, S, <<"bob">>)),
    ?assertEqual({ok, true}, mdss:set_data(Pid, S, <<"bob">>, <<0, 255>>)),
    ?assertEqual({ok, false}, mdss:set_data(Pid, S, <<"zed">>, <<"x">>)),
    ?assertEqual({ok, [{<<"ann">>, 300, 1, <<"team red">>}, {<<"bob">>, 200, 2, <<0, 255>>}]},
                 mdss:range_with_data(Pid, S, 0, 10)),
    ?assertEqual({ok, true}, mdss:set_data(Pid, S, <<"bob">>, undefined)),
    ?assertEqual({ok, undefined}, mdss:data(Pid, S, <<"bob">>)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:set_data(Pid, S, <<"ann">>, 7)).

first_ties(Pid) ->
    S = {<<"race">>, #{tiebreak => first}},
    [{ok, true} = mdss:add(Pid, S, R, 10) || R <- [<<"zoe">>, <<"amy">>, <<"bob">>]],
    {ok, _} = mdss:add(Pid, S, <<"amy">>, 12),
    {ok, _} = mdss:add(Pid, S, <<"amy">>, 10),
    ?assertEqual({ok, [{<<"zoe">>, 10, 1}, {<<"bob">>, 10, 2}, {<<"amy">>, 10, 3}]}, mdss:top(Pid, <<"race">>, 3)).

ties_and_scores(Pid) ->
    S = <<"ties">>,
    Max = 1 bsl 63 - 1,
    {ok, 5} = mdss:add_many(Pid, S, [{<<"a">>, 5}, {<<"b">>, 7}, {<<"c">>, 5}, {<<"ü✓"/utf8>>, 2.5},
                                      {<<"big">>, Max}]),
    ?assertEqual({ok, 4}, mdss:rank(Pid, S, <<"c">>)),
    ?assertEqual({ok, 3}, mdss:rank(Pid, S, <<"c">>, competition)),
    ?assertEqual({ok, 4}, mdss:call(Pid, rank, [S, <<"ü✓"/utf8>>, dense])),
    ?assertEqual({ok, Max}, mdss:score(Pid, S, <<"big">>)),
    ?assertEqual({ok, 2.5}, mdss:score(Pid, S, <<"ü✓"/utf8>>)),
    ?assertEqual({ok, 1}, mdss:rank_of_score(Pid, S, Max)),
    {ok, _} = mdss:add(Pid, S, <<"top">>, inf),
    {ok, _} = mdss:add(Pid, S, <<"bottom">>, '-inf'),
    ?assertEqual({ok, {<<"top">>, inf, 1}}, mdss:at(Pid, S, 1)),
    ?assertEqual({ok, {<<"bottom">>, '-inf', 7}}, mdss:at(Pid, S, 7)),
    ?assertEqual({ok, undefined}, mdss:at(Pid, S, 8)),
    ?assertEqual({ok, false}, mdss:add(Pid, S, <<"a">>, 8, best)),
    ?assertEqual({ok, 8}, mdss:score(Pid, S, <<"a">>)),
    ?assertEqual({ok, false}, mdss:call(Pid, add, [S, <<"a">>, 1, best])),
    ?assertEqual({ok, 8}, mdss:score(Pid, S, <<"a">>)),
    % the options of writes and reads that only call/3 takes: ZADD's NX/XX/GT/LT/CH, ranks with ties
    ?assertEqual({ok, true}, mdss:call(Pid, add, [S, <<"a">>, 9, gt, #{changed => true}])),
    ?assertEqual({ok, false}, mdss:call(Pid, add, [S, <<"new">>, 1, undefined, #{only => existing}])),
    ?assertEqual({ok, undefined}, mdss:call(Pid, incr, [S, <<"a">>, -1, #{'when' => gt}])),
    ?assertEqual({ok, [{<<"b">>, 7, 4}, {<<"c">>, 5, 5}]}, mdss:call(Pid, range, [S, 3, 2, competition])),
    ?assertEqual({ok, {<<"c">>, 5, 5}}, mdss:call(Pid, at, [S, 5, dense])).

every_other_operation(Pid) ->
    S = <<"ops">>,
    {ok, 6} = mdss:add_many(Pid, S, #{<<"m1">> => 1, <<"m2">> => 2, <<"m3">> => 3,
                                      <<"m4">> => 4, <<"m5">> => 5, <<"m6">> => 6}),
    ?assertEqual({ok, [3, undefined, 6]}, mdss:scores(Pid, S, [<<"m3">>, <<"zz">>, <<"m6">>])),
    ?assertEqual({ok, 3}, mdss:count(Pid, S, 5, 3)),
    ?assertEqual({ok, [{<<"m4">>, 4, 3}, {<<"m3">>, 3, 4}]}, mdss:range_by_score(Pid, S, 5, 3, 1, 5)),
    ?assertEqual({ok, [{<<"m5">>, 5, 2}, {<<"m4">>, 4, 3}, {<<"m3">>, 3, 4}]},
                 mdss:range_by_score(Pid, S, 5, 3)),
    ?assertEqual({ok, 1}, mdss:add_many(Pid, S, [{<<"m1">>, 10}, {<<"m9">>, 1}], incr)),
    ?assertEqual({ok, 11}, mdss:score(Pid, S, <<"m1">>)),
    ?assertEqual({ok, 2}, mdss:remove_many(Pid, S, [<<"m9">>, <<"m2">>, <<"zz">>])),
    ?assertEqual({ok, []}, mdss:check(Pid, S)),
    {ok, #{log_entries := Logged}} = mdss:info(Pid, S),
    ?assert(Logged > 0),  % small writes wait in the update log
    ?assertEqual({ok, true}, mdss:merge(Pid, S)),
    {ok, Info} = mdss:info(Pid, S),
    ?assertMatch(#{members := 5, order := desc, chunk_size := 1000, score_tree_height := 1, log_entries := 0}, Info).

percentiles_estimates_and_random_members(Pid) ->
    S = {<<"pct">>, #{chunk_size => 4}},
    {ok, 40} = mdss:load(Pid, S, [{iolist_to_binary(io_lib:format("p~2..0b", [I])), I} || I <- lists:seq(0, 39)]),
    ?assertEqual({ok, {8, 32}}, mdss:rank_with_score(Pid, S, <<"p32">>)),
    ?assertEqual({ok, {1, 39}}, mdss:rank_with_score(Pid, S, <<"p39">>, competition)),
    ?assertEqual({ok, undefined}, mdss:rank_with_score(Pid, S, <<"nobody">>)),
    ?assertEqual({ok, 0.175}, mdss:percentile(Pid, S, <<"p32">>)),
    ?assertEqual({ok, undefined}, mdss:percentile(Pid, S, <<"nobody">>)),
    ?assertEqual({ok, {<<"p19">>, 19, 21}}, mdss:at_percentile(Pid, S, 0.5)),
    ?assertEqual({ok, {<<"p00">>, 0, 40}}, mdss:at_percentile(Pid, S, 1, dense)),
    {ok, {_, Low, High}} = mdss:estimate_rank(Pid, S, {score, 20}),
    ?assert(Low =< 20 andalso 20 =< High),
    ?assertEqual({ok, {8, 8, 8}}, mdss:estimate_rank(Pid, S, <<"p32">>, #{max_error => 0})),
    ?assertEqual({ok, undefined}, mdss:estimate_rank(Pid, S, <<"nobody">>)),
    {ok, {_, PLow, PHigh}} = mdss:estimate_percentile(Pid, S, <<"p32">>),
    ?assert(PLow =< 0.175 andalso 0.175 =< PHigh),
    ?assertEqual({ok, {0.0, 0.0, 0.0}}, mdss:estimate_percentile(Pid, S, {score, inf}, #{max_error => 0})),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:estimate_rank(Pid, S, {score, 5}, #{ties => dense})),
    {ok, Drawn} = mdss:random_members(Pid, S, 5),
    ?assertEqual(5, length(lists:usort(Drawn))),
    ?assertEqual([{ok, R} || {_, _, R} <- Drawn], [mdss:rank(Pid, S, M) || {M, _, _} <- Drawn]).

pops_and_range_removals(Pid) ->
    S = <<"take">>,
    {ok, 10} = mdss:add_many(Pid, S, [{<<"t", (I + $0)>>, I} || I <- lists:seq(0, 9)]),
    ?assertEqual({ok, [{<<"t0">>, 0, 10}]}, mdss:pop_min(Pid, S, 1)),
    ?assertEqual({ok, [{<<"t9">>, 9, 1}, {<<"t8">>, 8, 2}]}, mdss:pop_max(Pid, S, 2)),
    ?assertEqual({ok, 3}, mdss:remove_range_by_score(Pid, S, 2, 4)),
    ?assertEqual({ok, 2}, mdss:remove_range_by_rank(Pid, S, 1, 2)),
    ?assertEqual({ok, [{<<"t5">>, 5, 1}, {<<"t1">>, 1, 2}]}, mdss:top(Pid, S, 10)),
    ?assertEqual({ok, 0}, mdss:remove_range_by_score(Pid, S, 100, inf)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:remove_range_by_rank(Pid, S, 0, 2)),
    ?assertEqual({ok, []}, mdss:pop_max(Pid, <<"take nothing">>, 3)).

load_gc_and_drop(Pid) ->
    S = <<"loaded">>,
    ?assertEqual({ok, 2}, mdss:load(Pid, S, #{<<"a">> => 1, <<"b">> => 2})),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:load(Pid, S, [{<<"c">>, 3}])),  % it has entries
    ?assertEqual({ok, 2}, mdss:load(Pid, S, [{<<"c">>, 3}, {<<"d">>, 4}, {<<"c">>, 5}], #{replace => true})),
    ?assertEqual({ok, [{<<"c">>, 5, 1}, {<<"d">>, 4, 2}]}, mdss:top(Pid, S, 10)),
    {ok, Deleted} = mdss:gc(Pid, S, #{wait => false, sweep => true, min_age => 0}),
    ?assert(is_integer(Deleted)),
    ?assertEqual({ok, []}, mdss:check(Pid, S)),
    ?assertEqual({ok, undefined}, mdss:drop(Pid, S)),
    ?assertEqual({ok, 0}, mdss:len(Pid, {S, #{order => asc}})),  % gone: made anew, with other settings
    ?assertMatch({ok, #{order := asc, members := 0}}, mdss:info(Pid, S)).

unions_and_intersections(Pid) ->
    A = {<<"u-a">>, #{tiebreak => member_desc}},
    ?assertEqual({ok, 3}, mdss:add_many(Pid, A, [{<<"x">>, 1}, {<<"y">>, 1}, {<<"z">>, 3}])),
    ?assertEqual({ok, [{<<"z">>, 3, 1}, {<<"y">>, 1, 2}, {<<"x">>, 1, 3}]}, mdss:top(Pid, A, 3)),
    ?assertEqual({ok, 2}, mdss:add_many(Pid, <<"u-b">>, [{<<"x">>, 10}, {<<"w">>, 5}])),
    ?assertEqual({ok, 4}, mdss:union(Pid, <<"u-all">>, [A, <<"u-b">>])),
    ?assertEqual({ok, [{<<"x">>, 11, 1}, {<<"w">>, 5, 2}]}, mdss:top(Pid, <<"u-all">>, 2)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:union(Pid, <<"u-all">>, [A])),
    ?assertEqual({ok, 1}, mdss:intersection(Pid, <<"u-all">>, [A, <<"u-b">>],
                                            #{weights => [2, -1], aggregate => max, replace => true})),
    ?assertEqual({ok, [{<<"x">>, 2, 1}]}, mdss:top(Pid, <<"u-all">>, 5)).

pages_through_a_multi_level_set(Pid) ->
    S = {<<"paged">>, #{order => asc, chunk_size => 4}},
    Pairs = [{iolist_to_binary(io_lib:format("p~3..0b", [I])), (I * 37) rem 101} || I <- lists:seq(1, 150)],
    {ok, 150} = mdss:call(Pid, add_many, [S, Pairs]),
    {ok, All} = mdss:call(Pid, range, [S, 0, 200]),
    ?assertEqual(lists:sort([{Score, M} || {M, Score} <- Pairs]), [{Score, M} || {M, Score, _} <- All]),
    ?assertEqual(All, pages(Pid, S, undefined, [])),
    {ok, #{score_tree_height := Height}} = mdss:call(Pid, info, [<<"paged">>]),
    ?assert(Height >= 3),
    ?assertEqual({ok, []}, mdss:call(Pid, check, [<<"paged">>])),
    ?assertMatch({error, {'SettingsMismatchError', _}}, mdss:call(Pid, len, [{<<"paged">>, #{order => desc}}])).

pages(Pid, S, Cursor, Acc) ->
    {ok, {Entries, Next}} = mdss:page(Pid, S, 7, Cursor),
    case Next of
        undefined -> Acc ++ Entries;
        _ -> pages(Pid, S, Next, Acc ++ Entries)
    end.

top_n(Pid) ->
    T = {<<"podium">>, #{n => 3}},
    ?assertEqual({ok, true}, mdss:topn_post_many(Pid, T, [{<<"ann">>, 7}, {<<"bob">>, 9}, {<<"cid">>, 8}])),
    ?assertEqual({ok, false}, mdss:topn_post(Pid, T, <<"dee">>, 2)),
    ?assertEqual({ok, true}, mdss:topn_post(Pid, T, <<"dee">>, 10)),
    ?assertEqual({ok, [{<<"dee">>, 10, 1}, {<<"bob">>, 9, 2}, {<<"cid">>, 8, 3}]}, mdss:topn_top(Pid, T)),
    ?assertEqual({ok, 8}, mdss:topn_threshold(Pid, T)),
    ?assertEqual({ok, undefined}, mdss:topn_threshold(Pid, <<"empty podium">>)),
    ?assertEqual({ok, true}, mdss:topn_post(Pid, T, <<"eve">>, 9)),
    ?assertEqual({ok, [{<<"dee">>, 10, 1}, {<<"bob">>, 9, 2}, {<<"eve">>, 9, 2}]}, mdss:call(Pid, topn_top, [T, dense])).

leaderboard(Pid) ->
    B = {<<"mission-7">>, #{columns => #{xp => desc, race => [{laps, desc}, {time_ms, asc}]},
                            accumulate => [shots], keep_best => #{time_ms => min}, windows => [all, week]}},
    Ann = #{xp => 600, shots => 10, laps => 3, time_ms => 61000, name => <<"Ann">>, pro => true},
    {ok, Posted} = mdss:board_post(Pid, B, <<"ann">>, Ann, #{post_id => <<"job-1">>}),
    ?assertEqual([true, true], maps:values(Posted)),
    {ok, Again} = mdss:board_post(Pid, B, <<"ann">>, Ann, #{post_id => <<"job-1">>}),  % a retry
    ?assertEqual([false, false], maps:values(Again)),
    {ok, _} = mdss:board_post(Pid, B, <<"bob">>, #{xp => 900, shots => 4, laps => 3, time_ms => 59000}),
    {ok, _} = mdss:board_post(Pid, B, <<"cid">>, #{xp => 600, laps => 2, time_ms => inf}),
    ?assertMatch({ok, {<<"ann">>, #{<<"xp">> := 600, <<"shots">> := 10, <<"name">> := <<"Ann">>, <<"pro">> := true},
                       _}}, mdss:board_row(Pid, B, <<"ann">>)),
    ?assertEqual({ok, undefined}, mdss:board_row(Pid, B, <<"nobody">>)),
    ?assertEqual({ok, #{<<"xp">> => 2, <<"race">> => 2}}, mdss:board_positions(Pid, B, <<"ann">>)),
    ?assertEqual({ok, #{<<"xp">> => 2, <<"race">> => 3}},
                 mdss:call(Pid, board_positions, [B, <<"cid">>, #{ties => competition}])),
    ?assertEqual([{1, <<"bob">>}, {2, <<"ann">>}, {3, <<"cid">>}], ranks(mdss:board_top(Pid, B, xp, 10))),
    ?assertEqual([{1, <<"bob">>}, {2, <<"ann">>}, {2, <<"cid">>}],
                 ranks(mdss:call(Pid, board_top, [B, xp, 10, #{ties => dense}]))),
    ?assertEqual([{1, <<"bob">>}, {2, <<"ann">>}], ranks(mdss:board_around(Pid, B, <<"ann">>, <<"race">>, 5, 0))),
    ?assertEqual([{1, <<"bob">>}, {3, <<"cid">>}], ranks(mdss:board_rows(Pid, B, [<<"cid">>, <<"bob">>, <<"zed">>], race))),
    {ok, {First, Cursor}} = mdss:board_page(Pid, B, xp, 2, undefined),
    {ok, {Second, undefined}} = mdss:board_page(Pid, B, xp, 2, Cursor),
    ?assertEqual([<<"bob">>, <<"ann">>, <<"cid">>], [O || {_, O, _, _} <- First ++ Second]),
    {ok, [<<"all">>, <<"week:", _/binary>>]} = mdss:board_windows(Pid, B),
    {ok, Share} = mdss:board_percentile(Pid, B, <<"ann">>, xp),
    ?assert(abs(Share - 1 / 3) < 1.0e-9),
    ?assertMatch({ok, {1, <<"bob">>, _, _}}, mdss:board_at_percentile(Pid, B, xp, 0.0)),
    ?assertEqual({ok, 3}, mdss:board_count(Pid, <<"mission-7">>, xp)),  % a stored board, by name
    ?assertEqual({ok, []}, mdss:call(Pid, board_check, [B, #{window => week}])),
    {ok, Deleted} = mdss:board_gc(Pid, B, #{sweep => true, wait => false}),
    ?assert(is_integer(Deleted)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:board_post(Pid, B, <<"ann">>, #{xp => [1]})),
    ?assertMatch({error, {'InvalidScoreError', _}}, mdss:board_post(Pid, B, <<"ann">>, #{xp => <<"lots">>})),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:board_top(Pid, B, nope, 10)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:board_row(Pid, <<"no such board">>, <<"ann">>)),
    F = {<<"first-to-reach">>, #{columns => #{xp => desc}, tiebreak => #{xp => first}}},
    [{ok, _} = mdss:board_post(Pid, F, O, #{xp => 5}) || O <- [<<"zed">>, <<"amy">>, <<"bob">>]],
    {ok, _} = mdss:board_post(Pid, F, <<"zed">>, #{xp => 5}),  % the same key: zed keeps its place
    ?assertEqual([{1, <<"zed">>}, {2, <<"amy">>}, {3, <<"bob">>}], ranks(mdss:board_top(Pid, F, xp, 10))).

leaderboard_removals_loads_and_drops(Pid) ->
    B = {<<"season-9">>, #{columns => #{xp => desc}, accumulate => [kills], windows => [all, day]}},
    ?assertEqual({ok, 2}, mdss:board_load(Pid, B, [{<<"ann">>, #{xp => 5, kills => 1}}, {<<"bob">>, #{xp => 9}},
                                                   {<<"ann">>, #{kills => 2}}])),
    ?assertMatch({ok, {<<"ann">>, #{<<"xp">> := 5, <<"kills">> := 3}, _}}, mdss:board_row(Pid, B, <<"ann">>)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:board_load(Pid, B, #{<<"cid">> => #{xp => 1}})),
    ?assertEqual({ok, 1}, mdss:board_load(Pid, B, #{<<"cid">> => #{xp => 1}}, #{window => all, replace => true})),
    ?assertEqual([{1, <<"cid">>}], ranks(mdss:board_top(Pid, B, xp, 10))),
    {ok, [Day]} = mdss:call(Pid, board_windows, [B, day]),
    ?assertEqual({ok, #{<<"all">> => false, Day => true}}, mdss:board_remove(Pid, B, <<"ann">>)),
    ?assertEqual({ok, #{Day => true}}, mdss:board_remove(Pid, B, <<"bob">>, #{window => day})),
    ?assertEqual({ok, 0}, mdss:call(Pid, board_count, [B, xp, #{window => Day}])),
    ?assertEqual({ok, []}, mdss:board_check(Pid, B)),
    ?assertEqual({ok, undefined}, mdss:board_drop_window(Pid, B, Day)),
    ?assertEqual({ok, [<<"all">>]}, mdss:board_windows(Pid, B)),
    ?assertEqual({ok, undefined}, mdss:board_drop(Pid, B)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:board_count(Pid, <<"season-9">>, xp)),  % no such board
    ?assertEqual({ok, 0}, mdss:board_count(Pid, B, xp)).  % with its columns: made anew

ranks({ok, Rows}) -> [{Rank, Owner} || {Rank, Owner, _, _} <- Rows].

errors_name_the_mdss_exception(Pid) ->
    S = <<"errors">>,
    ?assertMatch({error, {'InvalidMemberError', _}}, mdss:add(Pid, S, alice, 1)),
    ?assertMatch({error, {'InvalidMemberError', _}}, mdss:add(Pid, S, "alice", 1)),
    ?assertMatch({error, {'InvalidMemberError', _}}, mdss:add(Pid, S, <<255, 0>>, 1)),
    ?assertMatch({error, {'InvalidMemberError', _}}, mdss:add(Pid, S, <<>>, 1)),
    ?assertMatch({error, {'InvalidScoreError', _}}, mdss:add(Pid, S, <<"a">>, <<"1">>)),
    ?assertMatch({error, {'InvalidScoreError', _}}, mdss:add(Pid, S, <<"a">>, 1 bsl 63)),
    {ok, _} = mdss:add(Pid, S, <<"a">>, 1 bsl 63 - 1),
    ?assertMatch({error, {'InvalidScoreError', _}}, mdss:incr(Pid, S, <<"a">>, 1)),
    ?assertMatch({error, {'InvalidArgumentError', <<"unknown operation", _/binary>>}}, mdss:call(Pid, nope, [S])),
    ?assertMatch({error, {'InvalidArgumentError', <<"rank takes", _/binary>>}}, mdss:call(Pid, rank, [S])),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:call(Pid, rank, [S, <<"a">>, '1223'])),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:call(Pid, rank, not_a_list)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:range(Pid, S, -1, 10)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:range(Pid, S, 0, 1.5)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:call(Pid, len, [<<>>])),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:call(Pid, page, [S, 1, <<"not a cursor">>])),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:call(Pid, len, [{S, #{colour => red}}])),
    ?assertEqual({ok, 1}, mdss:call(Pid, len, [S])).

concurrent_callers(Pid) ->
    S = <<"counter">>,
    Self = self(),
    Workers = [spawn_link(fun() ->
                   Results = [mdss:incr(Pid, S, <<"hits">>, 1) || _ <- lists:seq(1, 25)],
                   Ranks = [mdss:rank(Pid, S, <<"hits">>) || _ <- lists:seq(1, 5)],
                   Self ! {done, self(), Results ++ Ranks}
               end) || _ <- lists:seq(1, 8)],
    Replies = lists:append([receive {done, W, R} -> R end || W <- Workers]),
    ?assertEqual([], [R || R <- Replies, element(1, R) =/= ok]),
    ?assertEqual({ok, 200}, mdss:score(Pid, S, <<"hits">>)).

timeout_then_late_reply_is_dropped(Pid) ->
    {ok, OsPid} = mdss:os_pid(Pid),
    signal("STOP", OsPid),
    Reply = mdss:call(Pid, len, [<<"season-1">>], 200),
    signal("CONT", OsPid),
    ?assertMatch({error, {timeout, _}}, Reply),
    ?assertEqual({ok, 3}, mdss:call(Pid, len, [<<"season-1">>])),
    ?assertEqual({ok, OsPid}, mdss:os_pid(Pid)).

restarts_a_port_that_exits(Pid) ->
    {ok, OsPid} = mdss:os_pid(Pid),
    signal("STOP", OsPid),
    Self = self(),
    spawn_link(fun() -> Self ! {pending, mdss:rank(Pid, <<"season-1">>, <<"alice">>)} end),
    timer:sleep(100), % the call is sent and waits on the stopped port
    signal("KILL", OsPid),
    receive {pending, Pending} -> ?assertMatch({error, {port_exited, _}}, Pending)
    after 10000 -> error(no_reply_after_port_exit)
    end,
    ?assertEqual({ok, 1}, mdss:rank(Pid, <<"season-1">>, <<"alice">>)),
    {ok, NewOsPid} = mdss:os_pid(Pid),
    ?assertNotEqual(OsPid, NewOsPid).

signal(Name, OsPid) ->
    [] = os:cmd("kill -" ++ Name ++ " " ++ integer_to_list(OsPid)),
    ok.

%% The port's own protocol, without the client: bad frames get errors and the port carries on.
raw_port_test_() ->
    {"bad frames get errors and the port carries on", {timeout, 60, fun() ->
        Python = case os:getenv("MDSS_PYTHON", "") of "" -> os:find_executable("python3"); P -> P end,
        Port = open_port({spawn_executable, Python},
                         [{args, ["-m", "mdss.port", "--store", "memory://"]}, {packet, 4}, binary, exit_status]),
        Ask = fun(Bin) -> true = port_command(Port, Bin), receive {Port, {data, D}} -> binary_to_term(D) end end,
        ?assertMatch({error, undefined, {'InvalidArgumentError', _}}, Ask(<<"not a term">>)),
        ?assertMatch({error, undefined, {'InvalidArgumentError', _}}, Ask(<<131, 104, 2>>)),
        ?assertMatch({error, undefined, {'InvalidArgumentError', _}}, Ask(term_to_binary({hello, world}))),
        ?assertMatch({error, 7, {'InvalidArgumentError', _}}, Ask(term_to_binary({call, 7, len}))),
        ?assertMatch({error, 8, {'InvalidArgumentError', _}}, Ask(term_to_binary({call, 8, "len", [<<"s">>]}))),
        Ref = make_ref(),
        ?assertEqual({reply, Ref, 0}, Ask(term_to_binary({call, Ref, len, [<<"s">>]}))),
        ?assertEqual({reply, {any, "term"}, true}, Ask(term_to_binary({call, {any, "term"}, add, [<<"s">>, <<"m">>, 1]}))),
        port_close(Port)
    end}}.

%% A bad timeout fails in its caller, not in the client every caller shares; bad start options stop the start.
bad_timeouts_and_options_test_() ->
    {"bad timeouts fail in the caller; bad options stop the start", {timeout, 60, fun() ->
        {ok, Pid} = mdss:start_link(store()),
        ?assertError(function_clause, mdss:call(Pid, len, [<<"s">>], 1.5)),
        ?assertError(function_clause, mdss:call(Pid, len, [<<"s">>], -1)),
        ?assertEqual({ok, 0}, mdss:call(Pid, len, [<<"s">>], 5000)),
        ?assertEqual({ok, 0}, mdss:call(Pid, len, [<<"s">>], infinity)),
        Trapping = process_flag(trap_exit, true),
        ?assertEqual({error, {bad_option, {timeout, 1.5}}}, mdss:start_link(store(), #{timeout => 1.5})),
        ?assertEqual({error, {bad_option, {threads, 0}}}, mdss:start_link(store(), #{threads => 0})),
        [receive {'EXIT', _, {bad_option, _}} -> ok after 5000 -> ok end || _ <- [timeout, threads]],
        process_flag(trap_exit, Trapping),
        mdss:stop(Pid)
    end}}.

%% An argument the port refuses as it decodes (an integer of over 255 bytes) is answered at once, not timed out.
undecodable_arguments_are_answered_test_() ->
    {"an argument refused as it decodes gets its error at once", {timeout, 60, fun() ->
        {ok, Pid} = mdss:start_link(store(), #{timeout => 30000}),
        Start = erlang:monotonic_time(millisecond),
        ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:add(Pid, <<"s">>, <<"a">>, 1 bsl 2100)),
        ?assert(erlang:monotonic_time(millisecond) - Start < 10000),
        ?assertEqual({ok, true}, mdss:add(Pid, <<"s">>, <<"a">>, 1)),
        mdss:stop(Pid)
    end}}.
